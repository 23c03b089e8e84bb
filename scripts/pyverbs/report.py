#!/usr/bin/env python3
"""Reads run_suite.py's results, one or more runs side by side, and prints
what passed, failed and was skipped, each skip reason counted and classed:
'hardware' (a vendor device, a GPU, device memory, a PCI device, huge pages,
raw packet QPs, tag matching: what no software device has, rxe included) or 'missing here' (what this stack has yet to
implement). Exits 1 when a run has a failure or an error, or passed nothing.

Usage: report.py LABEL=RESULTS.json [LABEL=RESULTS.json ...] [--markdown OUT.md]
          [--passes-on REFERENCE_LABEL]
--passes-on L: also fails when a test that passes in run L does not pass in
every other run (for kernel rxe as L: whatever passes there passes here).
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


def normalise(reason):
    # One line per kind of reason: numbers and errno texts vary per test.
    return re.sub(r"\d+", "N", reason.splitlines()[0] if reason else reason)[:110]


def main():
    args = sys.argv[1:]
    markdown, reference = None, None
    runs = []
    i = 0
    while i < len(args):
        if args[i] == "--markdown":
            markdown = args[i + 1]
            i += 2
        elif args[i] == "--passes-on":
            reference = args[i + 1]
            i += 2
        else:
            label, _, path = args[i].partition("=")
            runs.append((label, {r["id"]: r for r in json.load(open(path))}))
            i += 1
    if not runs:
        sys.exit(__doc__)
    ok = True
    lines = []
    out = lines.append
    out("| run | tests | passed | failed | errors | skipped: hardware | skipped: missing here |")
    out("|---|---|---|---|---|---|---|")
    for label, res in runs:
        c = collections.Counter(r["outcome"] for r in res.values())
        kinds = collections.Counter(classify(r["detail"], r["id"]) for r in res.values() if r["outcome"] == "skip")
        out(f"| {label} | {len(res)} | {c['pass']} | {c['fail']} | {c['error']} | {kinds['hardware']} | {kinds['missing here']} |")
        if c["fail"] or c["error"] or not c["pass"]:
            ok = False
    for label, res in runs:
        bad = [r for r in res.values() if r["outcome"] in ("fail", "error")]
        if bad:
            out(f"\n### {label}: failures and errors\n")
            for r in bad:
                last = r["detail"].strip().splitlines()[-1] if r["detail"].strip() else ""
                out(f"- `{r['id']}` ({r['outcome']}): {last}")
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
    if reference:
        ref = dict(runs)[reference]
        for label, res in runs:
            if label == reference:
                continue
            lost = [t for t, r in ref.items() if r["outcome"] == "pass" and res.get(t, {}).get("outcome") != "pass"]
            if lost:
                ok = False
                out(f"\n### Pass on {reference}, not on {label}\n")
                out("\n".join(f"- `{t}`: {res.get(t, {}).get('outcome', 'absent')}" for t in lost))
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
