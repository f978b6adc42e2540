"""What the GPU parts' summaries share (imported by their inline Python; not a part itself): reading a JSON report
that may be missing or cut short, medians over runs that skip unreadable values, and n/a for what is missing."""
import json
import statistics


def load(path):
    """The document, or None when the file is missing or not JSON (a run that failed or was cut off)."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def med(values):
    """Median of the numbers among values; None when there are none."""
    v = [x for x in values if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return statistics.median(v) if v else None


def fmt(x, places=1):
    return "n/a" if x is None else f"{x:.{places}f}"


def pick(doc, *keys):
    """The first dotted key (e.g. "steps.step_ns.median") that names a number in doc; None otherwise."""
    for k in keys:
        cur = doc
        for part in k.split("."):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if isinstance(cur, (int, float)):
            return cur
    return None
