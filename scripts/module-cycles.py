#!/usr/bin/env python3
"""Import cycles between the modules of each crate (docs/design.md).

The rule: one concept per module, and no cycles between the modules of a
crate (A uses B and B uses A, directly or through others). This script
builds, for every crate target of the workspace (each `src/lib.rs`,
`src/main.rs`, `src/bin/*.rs`), the graph of file-to-file dependencies and
prints its strongly connected components (Tarjan), each edge with one
example line, so a reader can see why the files hang together.

What is an edge, from file A to file B (a file is a module; an inline
`mod x { ... }` belongs to its file):
  - a `use` whose path resolves into B (`use crate::b::X`,
    `use super::X`, `use self::child::X`, `use child::X`, `pub use` too);
  - a path in code that does (`crate::b::f()`, `super::X`, `child::Y`).
A path is followed to the module that defines the name: `crate::X`, where
the crate root only re-exports X (`pub use b::X`), is an edge to b, and the
root's `pub use` is an edge of its own. `mod child;` is not an edge.
Comments, strings, `#[cfg(test)]` items (test modules, their files) and
files named tests.rs are left out: tests may reach anywhere.
Not seen: what needs no path, such as a method called on a value
(`self.on_sidr_req()`, defined in another file's `impl`), and macros
brought in by `#[macro_use]`. A file whose `impl Foo` extends a type of
another file names it (`use super::Foo`), so that edge is seen.

Usage: scripts/module-cycles.py [--all | --quiet] [--edges PATH] [--self-test]
  --all        print every crate's cycles in full (default: the enforced
               ones in full, the others one line each)
  --quiet      print the enforced cycles only (scripts/check.sh)
  --edges PATH print the edges out of the files under PATH (a debugging aid)
  --self-test  check the checker on a small made-up workspace
Exit status: 1 when a crate has a cycle that is not one of STILL_TO_BREAK
(or a self-test check fails), 0 otherwise.
"""

import os
import re
import sys

# Every crate of the workspace must be acyclic. The cycles below are the
# ones not yet broken (issue 31): a cycle fails the check unless all its
# files are in one of these sets, so a new cycle, or one that grows, fails
# anywhere. Take a set out once its cycle is gone.
STILL_TO_BREAK = []

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


# ---------------------------------------------------------------- lexing

def strip(text):
    """Comments, string and char literals blanked out; newlines kept, so
    line numbers still hold."""
    out = []
    i, n = 0, len(text)

    def blank(s):
        return "".join("\n" if c == "\n" else " " for c in s)

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(blank(text[i:j]))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(blank(text[i:j]))
            i = j
        elif c in "rb" and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")) and \
                re.match(r"(?:br|r)#*\"", text[i:i + 260]):
            m = re.match(r"(?:br|r)(#*)\"", text[i:])
            close = '"' + m.group(1)
            j = text.find(close, i + m.end())
            j = n if j < 0 else j + len(close)
            out.append(blank(text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(blank(text[i:j + 1]))
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\'', b'x') or a lifetime ('a).
            if i + 1 < n and text[i + 1] == "\\":
                j = i + 3   # past the escaped character, which may be a quote
                while j < n and text[j] != "'":
                    j += 1
                out.append(blank(text[i:j + 1]))
                i = j + 1
            elif i + 2 < n and text[i + 2] == "'":
                out.append("   ")
                i += 3
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


TOKEN = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_]*|\d[A-Za-z0-9_]*|::|\S")


def tokens(text):
    """(token, line) pairs of the stripped text."""
    toks = []
    for lineno, line in enumerate(text.split("\n"), 1):
        for m in TOKEN.finditer(line):
            t = m.group(0)
            toks.append((t[1:] if t == "$crate" else t, lineno))
    return toks


ITEM_KEYWORDS = {"fn", "struct", "enum", "const", "static", "type", "trait", "union"}


# ---------------------------------------------------------------- modules

class Module:
    def __init__(self, path, file, parent):
        self.path = path            # tuple of names from the crate root
        self.file = file            # the file the module's code is in
        self.parent = parent        # Module or None
        self.children = {}          # name -> Module
        self.imports = {}           # name -> (Module it was written in, segments)
        self.globs = []             # (Module, segments) of `use path::*`
        self.items = set()          # names defined here
        self.refs = []              # (segments, line) used in the module
        self.dir = None             # where `mod x;` looks for x's file


def parse_file(mod, file, crate):
    """Parse one file into `mod` (and its inline modules); returns the
    modules declared as `mod x;` (to be read from their own files)."""
    with open(file, encoding="utf-8") as f:
        raw = f.read()
    crate["lines"][file] = raw.split("\n")
    toks = tokens(strip(raw))
    pending = []
    i, n = 0, len(toks)
    depth = 0
    stack = [(mod, 0)]   # (module, brace depth its body is at)
    test_attr = False

    def skip_item(i):
        """Index after the item starting at i (`;` or a braced body)."""
        d = 0
        while i < n:
            t = toks[i][0]
            if t in "([":
                d += 1
            elif t in ")]":
                d -= 1
            elif t == "{":
                d += 1
            elif t == "}":
                d -= 1
                if d == 0:
                    return i + 1
                if d < 0:
                    return i
            elif t == ";" and d == 0:
                return i + 1
            i += 1
        return i

    while i < n:
        t, line = toks[i]
        cur = stack[-1][0]
        at_top = depth == stack[-1][1]
        if t == "#" and i + 1 < n and toks[i + 1][0] in ("[", "!"):
            inner = toks[i + 1][0] == "!"
            j = i + (2 if inner else 1)
            # the attribute's tokens, up to the matching `]`
            d, k = 0, j
            while k < n:
                if toks[k][0] == "[":
                    d += 1
                elif toks[k][0] == "]":
                    d -= 1
                    if d == 0:
                        break
                k += 1
            attr = [x[0] for x in toks[j + 1:k]]
            if attr == ["cfg", "(", "test", ")"]:
                if inner:
                    return []           # the whole file is a test module
                test_attr = True
            i = k + 1
            continue
        if test_attr:
            test_attr = False
            i = skip_item(i)
            continue
        if t == "{":
            depth += 1
        elif t == "}":
            depth -= 1
            if len(stack) > 1 and depth < stack[-1][1]:
                stack.pop()
        elif t == "mod" and i + 2 < n and re.match(r"\w+$", toks[i + 1][0]):
            name = toks[i + 1][0]
            cur.items.add(name)
            child = Module(cur.path + (name,), file, cur)
            cur.children[name] = child
            if toks[i + 2][0] == ";":
                child.dir = os.path.join(cur.dir, name)
                pending.append(child)
                i += 3
                continue
            if toks[i + 2][0] == "{":
                child.dir = os.path.join(cur.dir, name)
                depth += 1
                stack.append((child, depth))
                i += 3
                continue
        elif t == "use" and (i == 0 or toks[i - 1][0] != "::"):
            j = i + 1
            while j < n and toks[j][0] != ";":
                j += 1
            for segs, name, glob in use_tree([x[0] for x in toks[i + 1:j]]):
                if not segs:
                    continue
                cur.refs.append((segs, line))
                if glob:
                    cur.globs.append((cur, segs))
                elif name and name != "_":
                    cur.imports[name] = (cur, segs)
            i = j + 1
            continue
        elif at_top and t in ITEM_KEYWORDS and i + 1 < n and re.match(r"[A-Za-z_]\w*$", toks[i + 1][0]):
            k = i + 1
            while k + 1 < n and toks[k][0] in ("mut", "fn", "unsafe", "extern"):   # static mut X, const fn f
                k += 1
            cur.items.add(toks[k][0])
        elif at_top and t == "macro_rules" and i + 2 < n and toks[i + 1][0] == "!":
            cur.items.add(toks[i + 2][0])
        elif re.match(r"[A-Za-z_]\w*$", t) and i + 1 < n and toks[i + 1][0] == "::" and \
                (i == 0 or toks[i - 1][0] != "::"):
            # a path in code: its segments
            if not (i >= 2 and toks[i - 1][0] == "in" and toks[i - 2][0] == "("):   # pub(in crate::x)
                segs = [t]
                j = i + 1
                while j + 1 < n and toks[j][0] == "::" and re.match(r"[A-Za-z_]\w*$", toks[j + 1][0]):
                    segs.append(toks[j + 1][0])
                    j += 2
                cur.refs.append((segs, line))
                i = j
                continue
        i += 1
    return pending


def use_tree(toks):
    """The leaves of a use tree: (segments, bound name, is_glob)."""
    leaves = []

    def parse(i, prefix):
        segs = list(prefix)
        while i < len(toks):
            t = toks[i]
            if t == "::":
                i += 1
            elif t == "{":
                i += 1
                while i < len(toks) and toks[i] != "}":
                    i = parse(i, segs)
                    if i < len(toks) and toks[i] == ",":
                        i += 1
                return i + 1
            elif t == "*":
                leaves.append((segs, None, True))
                return i + 1
            elif t in (",", "}"):
                break
            elif t == "as":
                leaves.append((segs, toks[i + 1], False))
                return i + 2
            else:
                segs = segs + [t]
                i += 1
        if segs:
            name = segs[-1]
            if name == "self":
                segs = segs[:-1]
                name = segs[-1] if segs else None
            leaves.append((segs, name, False))
        return i

    # leading `::` (an extern crate) and visibility are not segments
    if toks and toks[0] == "::":
        return []
    parse(0, [])
    return leaves


def load_crate(root_file):
    """The module tree of the crate whose root file is `root_file`."""
    crate = {"lines": {}}
    top = Module((), root_file, None)
    top.dir = os.path.dirname(root_file)
    todo = [(top, root_file)]
    while todo:
        mod, file = todo.pop()
        for child in parse_file(mod, file, crate):
            # foo.rs keeps its children in foo/, mod.rs and lib.rs in their own directory
            candidates = [child.dir + ".rs", os.path.join(child.dir, "mod.rs")]
            found = next((c for c in candidates if os.path.exists(c)), None)
            if found is None or child.path[-1] == "tests":
                # a test module's file (tests.rs, tests/mod.rs): tests may reach anywhere
                del mod.children[child.path[-1]]
                continue
            child.file = found
            child.dir = os.path.dirname(found) if found.endswith("mod.rs") else found[:-3]
            todo.append((child, found))
    # inline modules, collected through their parents
    seen, stack = set(), [top]
    crate["all"] = []
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        crate["all"].append(m)
        stack.extend(m.children.values())
    return crate


# ---------------------------------------------------------------- resolving

def resolve(scope, segs, depth=0):
    """The module a path written in `scope` lands in (the one defining its
    name where that can be told), or None for another crate's path."""
    if depth > 16 or not segs:
        return None
    first = segs[0]
    if first == "crate":
        cur, rest = scope, segs[1:]
        while cur.parent:
            cur = cur.parent
    elif first in ("super", "self"):
        cur, rest = scope, segs
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                if cur.parent is None:
                    return None
                cur = cur.parent
            rest = rest[1:]
    elif first in scope.children:
        cur, rest = scope, segs
    elif first in scope.imports:
        where, target = scope.imports[first]
        return resolve(where, target + segs[1:], depth + 1)
    else:
        return None
    return walk(cur, rest, depth)


def walk(cur, rest, depth):
    """From module `cur`, the module that defines the path `rest`."""
    while rest and rest[0] in cur.children:
        cur, rest = cur.children[rest[0]], rest[1:]
    if not rest or rest[0] in cur.items or depth > 16:
        return cur
    name = rest[0]
    if name in cur.imports:
        where, target = cur.imports[name]
        found = resolve(where, target + rest[1:], depth + 1)
        return found if found is not None else cur
    for where, target in cur.globs:
        m = resolve(where, target, depth + 1)
        if m is not None and m is not cur and names(m, name, depth + 1):
            return walk(m, rest, depth + 1)
    return cur


def names(m, name, depth):
    """Whether module m has `name` in its namespace (defined, imported, globbed)."""
    if name in m.items or name in m.children or name in m.imports:
        return True
    if depth > 16:
        return False
    for where, target in m.globs:
        g = resolve(where, target, depth + 1)
        if g is not None and g is not m and names(g, name, depth + 1):
            return True
    return False


def graph(crate):
    """{file: {file: (line, text)}}: the first example of each edge."""
    edges = {}
    for m in crate["all"]:
        for segs, line in m.refs:
            target = resolve(m, segs)
            if target is None or target.file == m.file:
                continue
            e = edges.setdefault(m.file, {})
            if target.file not in e:
                e[target.file] = (line, crate["lines"][m.file][line - 1].strip())
    for m in crate["all"]:
        edges.setdefault(m.file, {})
    return edges


def tarjan(edges):
    index, low, on, stack, sccs = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, {})):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            sccs.append(sorted(scc))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return [s for s in sccs if len(s) > 1]


def shortest_loop(edges, start, members):
    """The shortest cycle through `start` inside `members` (breadth first)."""
    prev, todo = {start: None}, [start]
    while todo:
        nxt = []
        for a in todo:
            for b in sorted(edges[a]):
                if b == start:
                    path = [a]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return list(reversed(path)) + [start]
                if b in members and b not in prev:
                    prev[b] = a
                    nxt.append(b)
        todo = nxt
    return [start]


# ---------------------------------------------------------------- the crates

def crate_dirs(root):
    """The workspace's members (and the root package), from Cargo.toml."""
    with open(os.path.join(root, "Cargo.toml"), encoding="utf-8") as f:
        toml = f.read()
    m = re.search(r"^members\s*=\s*\[(.*?)\]", toml, re.S | re.M)
    dirs = re.findall(r'"([^"]+)"', m.group(1)) if m else []
    if re.search(r"^\[package\]", toml, re.M):
        dirs.insert(0, ".")
    return dirs


def targets(root, d):
    """A crate directory's targets under src/: lib.rs, main.rs, bin/*."""
    src = os.path.join(root, d, "src")
    roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs")]
    binf = os.path.join(src, "bin")
    if os.path.isdir(binf):
        for f in sorted(os.listdir(binf)):
            p = os.path.join(binf, f)
            roots.append(p if f.endswith(".rs") else os.path.join(p, "main.rs"))
    return [r for r in roots if os.path.isfile(r)]


def analyze(root, known):
    """[(target, edges, [(scc, enforced)])] for every target of the workspace
    at `root`; a cycle is enforced unless its files are all in one of the
    sets of `known` (paths relative to `root`)."""
    out = []
    for d in crate_dirs(root):
        for root_file in targets(root, d):
            edges = graph(load_crate(root_file))
            sccs = []
            for scc in tarjan(edges):
                files = {os.path.relpath(f, root) for f in scc}
                enforced = not any(files <= k for k in known)
                sccs.append((scc, enforced))
            out.append((root_file, edges, sccs))
    return out


def report(root, results, show_all, out=sys.stdout, quiet=False):
    """Prints the cycles; returns (cycles, enforced cycles)."""
    def rel(p):
        return os.path.relpath(p, root)
    total = failed = 0
    for root_file, edges, sccs in results:
        for scc, enforced in sccs:
            total += 1
            failed += enforced
            if quiet and not enforced:
                continue
            tag = "must be acyclic" if enforced else "still to break"
            print(f"{rel(root_file)}: a cycle of {len(scc)} files ({tag}): " + " ".join(rel(f) for f in scc), file=out)
            if not (enforced or show_all):
                continue
            members = set(scc)
            loop = shortest_loop(edges, scc[0], members)
            print("  for one: " + " -> ".join(rel(f) for f in loop), file=out)
            for a in scc:
                for b, (line, text) in sorted(edges[a].items()):
                    if b in members:
                        print(f"  {rel(a)} -> {rel(b)}", file=out)
                        print(f"      {rel(a)}:{line}: {text}", file=out)
            print(file=out)
    return total, failed


def self_test():
    """The checker on a made-up workspace: what must and must not be an edge."""
    import io
    import tempfile
    files = {
        "Cargo.toml": '[workspace]\nmembers = ["a"]\n',
        # the root re-exports; `mod` is no edge
        "a/src/lib.rs": "mod types;\nmod machine;\npub mod user;\npub mod p;\npub use types::T;\n",
        # comments, strings and test modules name anything
        "a/src/types.rs": '//! crate::machine::M\npub struct T;\nconst S: &str = "crate::machine::M";\n'
                          "#[cfg(test)]\nmod tests {\n    use crate::machine::M;\n}\n",
        "a/src/machine.rs": "use crate::types::T;\npub struct M(pub T);\n#[cfg(test)]\nmod checks;\nmod tests;\n",
        "a/src/machine/checks.rs": "use crate::user::U;\n",
        "a/src/machine/tests.rs": "use crate::user::U;\n",
        # through the root's re-export: an edge to types, not to lib.rs
        "a/src/user.rs": "use crate::T;\npub struct U(crate::machine::M, T);\n"
                         "mod inner {\n    pub fn f() -> super::U { todo!() }\n}\n",
        # a parent and its child that use each other
        "a/src/p.rs": "mod c;\npub use c::X;\npub struct Y;\n",
        "a/src/p/c.rs": "pub struct X(pub super::Y);\n",
    }
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            path = os.path.join(root, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        [(_, edges, sccs)] = analyze(root, [])
        [(_, _, known)] = analyze(root, [{"a/src/p.rs", "a/src/p/c.rs", "a/src/other.rs"}])

        def e(a, b):
            return os.path.join(root, "a/src", b) in edges[os.path.join(root, "a/src", a)]
        checks = [
            ("lib.rs re-exports types.rs", e("lib.rs", "types.rs")),
            ("`mod machine;` is no edge", not e("lib.rs", "machine.rs")),
            ("no edge out of comments, strings or test modules", not edges[os.path.join(root, "a/src/types.rs")]),
            ("machine.rs uses types.rs", e("machine.rs", "types.rs")),
            ("#[cfg(test)] files and tests.rs are left out", set(edges) == {os.path.join(root, "a/src", f) for f in ("lib.rs", "types.rs", "machine.rs", "user.rs", "p.rs", "p/c.rs")}),
            ("crate::T is types.rs's", e("user.rs", "types.rs") and not e("user.rs", "lib.rs")),
            ("a path in code is an edge", e("user.rs", "machine.rs")),
            ("an inline module's super:: is its own file", len(edges[os.path.join(root, "a/src/user.rs")]) == 2),
            ("a child's super:: and its parent's pub use", e("p/c.rs", "p.rs") and e("p.rs", "p/c.rs")),
            ("one cycle, p.rs and p/c.rs, enforced",
             [([os.path.relpath(f, root) for f in scc], enf) for scc, enf in sccs]
             == [(["a/src/p.rs", "a/src/p/c.rs"], True)]),
            ("a cycle inside a set still to break is not enforced", [enf for _, enf in known] == [False]),
        ]
        buf = io.StringIO()
        report(root, [(os.path.join(root, "a/src/lib.rs"), edges, sccs)], False, buf)
        checks.append(("the report shows the edge and its line", "a/src/p/c.rs:1: pub struct X(pub super::Y);" in buf.getvalue()))
    bad = [name for name, ok in checks if not ok]
    for name, ok in checks:
        print(("ok   " if ok else "FAIL ") + name)
    return 1 if bad else 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    show_all = "--all" in argv
    results = analyze(ROOT, STILL_TO_BREAK)
    if "--edges" in argv:
        under = argv[argv.index("--edges") + 1]
        for _, edges, _ in results:
            for a in sorted(edges):
                if os.path.relpath(a, ROOT).startswith(under):
                    for b, (line, text) in sorted(edges[a].items()):
                        print(f"{os.path.relpath(a, ROOT)} -> {os.path.relpath(b, ROOT)}    "
                              f"{os.path.relpath(a, ROOT)}:{line}: {text}")
        return 0
    total, failed = report(ROOT, results, show_all, quiet="--quiet" in argv)
    if total == 0:
        print("module-cycles: no cycles")
    elif failed:
        print(f"module-cycles: {failed} new cycle(s) (every crate must be acyclic): "
              "move what both sides need into a module of its own")
    else:
        print(f"module-cycles: {total} cycle(s), each one of STILL_TO_BREAK (scripts/module-cycles.py)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
