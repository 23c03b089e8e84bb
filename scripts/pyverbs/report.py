#!/usr/bin/env python3
"""Reads run_suite.py's results, one or more runs side by side, and prints
what passed, failed and was skipped, each skip reason counted and classed:
'hardware' (a vendor device, a GPU, device memory, a PCI device, huge pages,
raw packet QPs, tag matching: what no software device has, rxe included) or 'missing here' (what this stack has yet to
implement). Exits 1 when a run has a failure or an error, or passed nothing.

Usage: report.py LABEL=RESULTS.json [LABEL=RESULTS.json ...] [--markdown OUT.md]
          [--passes-on REFERENCE[:LABEL] ...] [--known FILE]
--known FILE: tests that fail here for a feature not implemented yet (a
test id and the reason per line, # comments): listed apart, not failing
the report; one that passes in every run fails it (off the list with it).
--passes-on L: also fails when a test that passes in run L does not pass in
every other run (for kernel rxe as L: whatever passes there passes here);
L:M compares run M only (e.g. rxe-two:ours-two). Repeatable. A reference
run's own failures are listed but do not fail the report (they are the
reference's, e.g. kernel rxe's, not this stack's).
With more than one run, a table of each test module's passed/failed/skipped
counts puts the runs side by side.
"""
import collections
import json
import re
import sys

HARDWARE = re.compile(
    r"MLX|mlx[0-9]|EFA|efa|dmabuf|Device memory|huge pages|PCI device|cuda|CUDA|GPU|"
    r"RAW QP must be done by root|Raw Packet QP|QP type 8 ",  # type 8: raw packet, which rxe lacks too
)


# Whole modules about one vendor's device or a hardware offload rxe lacks
# too (tag matching), whatever their skip message says.
HARDWARE_MODULES = re.compile(r"^tests\.test_(mlx5|efa|cuda|tag_matching)")


def classify(reason, test_id=""):
    return "hardware" if HARDWARE.search(reason) or HARDWARE_MODULES.search(test_id) else "missing here"


def said(record):
    """What a failed test's processes printed besides unittest's own lines
    (run_suite.py's "output"), on one line."""
    lines = []
    for line in record.get("output", "").splitlines():
        # unittest's "name (id) ... " comes first, on the line the test's
        # own output may go on with
        line = line.split(" ... ", 1)[-1].strip()
        if not line or line in ("ok", "ERROR", "FAIL") or line.startswith(record["id"].rsplit(".", 1)[-1]):
            continue
        lines.append(line)
    return " / ".join(dict.fromkeys(lines))[:300]


def why(record):
    """A failure's last traceback line, and what the test printed."""
    detail = record.get("detail", "").strip()
    text = detail.splitlines()[-1] if detail else ""
    extra = said(record)
    return f"{text} ({extra})" if extra else text


def normalise(reason):
    # One line per kind of reason: numbers and errno texts vary per test.
    return re.sub(r"\d+", "N", reason.splitlines()[0] if reason else reason)[:110]


def main():
    args = sys.argv[1:]
    markdown, references, known = None, [], {}
    runs = []
    i = 0
    while i < len(args):
        if args[i] == "--markdown":
            markdown = args[i + 1]
            i += 2
        elif args[i] == "--known":
            for line in open(args[i + 1]):
                if line.strip() and not line.startswith("#"):
                    test, _, reason = line.strip().partition(" ")
                    known[test] = reason.strip()
            i += 2
        elif args[i] == "--passes-on":
            ref, _, only = args[i + 1].partition(":")
            references.append((ref, only))
            i += 2
        else:
            label, _, path = args[i].partition("=")
            runs.append((label, {r["id"]: r for r in json.load(open(path))}))
            i += 1
    if not runs:
        sys.exit(__doc__)
    labels = [label for label, _ in runs]
    for ref, only in references:
        for name in (ref, only):
            if name and name not in labels:
                sys.exit(f"report: --passes-on names {name}, which is not one of the runs ({', '.join(labels)})")
    reference_labels = {ref for ref, _ in references}
    ok = True
    lines = []
    out = lines.append
    out("| run | tests | passed | failed | errors | skipped: hardware | skipped: missing here |")
    out("|---|---|---|---|---|---|---|")
    for label, res in runs:
        c = collections.Counter(r["outcome"] for r in res.values())
        kinds = collections.Counter(classify(r["detail"], r["id"]) for r in res.values() if r["outcome"] == "skip")
        out(f"| {label} | {len(res)} | {c['pass']} | {c['fail']} | {c['error']} | {kinds['hardware']} | {kinds['missing here']} |")
        unknown = [r for r in res.values() if r["outcome"] in ("fail", "error") and r["id"] not in known]
        if unknown and label not in reference_labels or not c["pass"]:
            ok = False
    for label, res in runs:
        bad = [r for r in res.values() if r["outcome"] in ("fail", "error") and r["id"] not in known]
        if bad:
            out(f"\n### {label}: failures and errors\n")
            for r in bad:
                out(f"- `{r['id']}` ({r['outcome']}): {why(r)}")
        expected = [r for r in res.values() if r["outcome"] in ("fail", "error") and r["id"] in known]
        if expected and label not in reference_labels:
            out(f"\n### {label}: known failures (not implemented here; --known)\n")
            for r in expected:
                out(f"- `{r['id']}` ({r['outcome']}): {known[r['id']]}")
    ours = [res for label, res in runs if label not in reference_labels]
    for t in known:
        if ours and all(res.get(t, {}).get("outcome") == "pass" for res in ours):
            ok = False
            out(f"\n### `{t}` is on the known-failures list but passes: take it off the list")
        reasons = collections.Counter(
            normalise(r["detail"])
            for r in res.values()
            if r["outcome"] == "skip" and classify(r["detail"], r["id"]) != "hardware"
        )
        if reasons:
            out(f"\n### {label}: skipped for what is missing here\n")
            for reason, n in reasons.most_common():
                out(f"- {n} x {reason}")
    if len(runs) > 1:
        # side by side, per test module: passed / failed+errors / skipped
        modules = collections.defaultdict(lambda: collections.defaultdict(collections.Counter))
        for label, res in runs:
            for t, r in res.items():
                kind = {"pass": "p", "fail": "f", "error": "f"}.get(r["outcome"], "s")
                modules[".".join(t.split(".")[:2])][label][kind] += 1
        out("\n### Side by side, per module (passed / failed / skipped)\n")
        out("| module | " + " | ".join(labels) + " |")
        out("|---|" + "---|" * len(runs))
        all_skipped = 0
        for m in sorted(modules):
            if not any(modules[m][l]["p"] or modules[m][l]["f"] for l in labels):
                all_skipped += 1  # e.g. a vendor's module: skipped everywhere
                continue
            cells = [f"{modules[m][l]['p']} / {modules[m][l]['f']} / {modules[m][l]['s']}" for l in labels]
            out(f"| `{m}` | " + " | ".join(cells) + " |")
        if all_skipped:
            out(f"\n({all_skipped} more modules: every test skipped in every run)")
        ids = sorted(set().union(*(res.keys() for _, res in runs)))
        differ = [t for t in ids if len({res.get(t, {}).get("outcome") for _, res in runs}) > 1]
        out("\n### Tests whose outcome differs between runs\n")
        out("| test | " + " | ".join(label for label, _ in runs) + " |")
        out("|---|" + "---|" * len(runs))
        for t in differ:
            cells = []
            for _, res in runs:
                r = res.get(t)
                cells.append("-" if r is None else r["outcome"] + (f" ({normalise(r['detail'])[:50]})" if r["outcome"] == "skip" else ""))
            out(f"| `{t}` | " + " | ".join(cells) + " |")
        if not differ:
            out("(none)")
    for reference, only in references:
        ref = dict(runs)[reference]
        for label, res in runs:
            if label == reference or label in reference_labels or (only and label != only):
                continue
            lost = [
                t
                for t, r in ref.items()
                if r["outcome"] == "pass" and res.get(t, {}).get("outcome") != "pass" and t not in known
            ]
            if lost:
                ok = False
                out(f"\n### Pass on {reference}, not on {label}\n")
                for t in lost:
                    r = res.get(t, {})
                    detail = r.get("detail", "").strip()
                    if r.get("outcome") == "skip":
                        text = detail.splitlines()[0] if detail else ""
                    else:
                        text = why(r) if r else ""
                    out(f"- `{t}`: {r.get('outcome', 'absent')}" + (f": {text[:400]}" if text else ""))
            else:
                out(f"\n### Pass on {reference}, not on {label}\n\n(none: every test that passes on {reference} passes on {label})")
    text = "\n".join(lines)
    print(text)
    if markdown:
        with open(markdown, "w") as f:
            f.write(text + "\n")
    for label, res in runs:
        c = collections.Counter(r["outcome"] for r in res.values())
        print(f"{label}: {c['pass']} passed, {c['fail'] + c['error']} failed, {c['skip']} skipped")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
