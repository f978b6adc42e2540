# The one ASan + UBSan build directory of scripts/fuzz-smoke and the asan parts of scripts/sanitize (sourced by
# both): configured alike by either, so the second stage of `scripts/test` reuses the library objects the first
# one compiled instead of building its own.
#   library (what the tests and the fuzz targets exercise): -O1 -g1, so the fuzz targets keep their rate of
#     executions and the tests their speed;
#   harness (test executables, the benches, the argv fuzzer's copy of the CLI sources): -O0
#     (ENGRAM_HARNESS_CXX_FLAGS), about half the compile time of -O1 under ASan for code that only drives the library;
#   with clang and its libFuzzer runtime: libFuzzer's coverage instrumentation on every object
#     (ENGRAM_BUILD_FUZZERS=ON, -fsanitize=fuzzer-no-link); without it the tests build alone and fuzz-smoke skips.
# Settings: ASAN_BUILD_DIR (default build-asan), ASAN_OPT (library flags), ASAN_HARNESS_OPT (harness flags).

asan_build_dir() { echo "${ASAN_BUILD_DIR:-$root/build-asan}"; }

# asan_fuzz_capable CXX: 0 when CXX links a libFuzzer target (clang with libclang-rt-<v>-dev).
asan_fuzz_capable() {
  local cxx=$1 d rc
  case $cxx in *clang++*) ;; *) return 1 ;; esac
  d=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$d/p.cpp"
  "$cxx" -fsanitize=fuzzer "$d/p.cpp" -o "$d/p" >/dev/null 2>&1; rc=$?
  rm -rf "$d"
  return $rc
}

# asan_configure DIR CC CXX: configures DIR (quietly; the log is DIR/configure.log, printed on failure).
asan_configure() {
  local dir=$1 cc=$2 cxx=$3 fuzz=OFF opt=${ASAN_OPT:--O1 -g1} harness=${ASAN_HARNESS_OPT:--O0}
  asan_fuzz_capable "$cxx" && fuzz=ON
  mkdir -p "$dir"
  if ! cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$opt" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$opt" \
      -DENGRAM_HARNESS_CXX_FLAGS="$harness" -DENGRAM_SANITIZE=address,undefined -DENGRAM_BUILD_FUZZERS=$fuzz \
      -DENGRAM_BUILD_TESTS=ON -DENGRAM_CUDA=OFF -DENGRAM_BUILD_PYTHON=OFF -DENGRAM_WERROR=ON \
      >"$dir/configure.log" 2>&1; then
    cat "$dir/configure.log" >&2
    return 1
  fi
}
