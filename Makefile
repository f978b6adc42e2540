# Convenience targets over the README's two commands (scripts/run, scripts/test), for machines that have make.
.PHONY: run test build setup clean
run:
	scripts/run
test:
	scripts/test
build:
	scripts/setup && scripts/build
setup:
	scripts/setup
clean:
	rm -rf build
