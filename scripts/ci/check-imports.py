#!/usr/bin/env python3
"""Checks that the crate's imports run one way.

The layer order is written once, in src/lib.rs: its `pub mod` lines, bottom up. This script
reads that list and fails when
  - a module refers to one declared below it (`crate::matrix::...` from `report`), or
  - the files of one module refer to each other in a circle (a.rs -> b.rs -> a.rs). A file's
    use of its own parent (`super::Error` in a child of the mod.rs that declares it) is not
    counted: the parent is the module's face, its `mod` lines and re-exports point down.

Every path is counted: `use` trees (`use crate::x::{a, b::c}`), paths in code
(`crate::x::f()`), `super::` and `self::` paths, and a child module named bare (`parse::f` in
the file that declares `mod parse`). Comments and string literals are skipped; so is a file's
`#[cfg(test)] mod tests { ... }` block, which may use whatever it tests.

Usage: scripts/ci/check-imports.py [CRATE_SRC_DIR]   (default: src/ beside this script's parent)
       scripts/ci/check-imports.py --self-test  (planted crates: the check fails where it should)
Exit 0 when clean, 1 with one line per offending reference.
"""

import os
import re
import sys


def strip_code(text):
    """Text with comments, string and char literals blanked (newlines kept for line numbers)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + len(hashes) + 2)
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or c == "'" and text.startswith("'\\u{", i):
            j = text.find("'", i + 1 if text[i + 1] != "\\" else i + 3)
            out.append("' '")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_blocks(code):
    """Blanks `#[cfg(test)] mod NAME { ... }` blocks (brace matched), keeping line numbers."""
    while True:
        m = re.search(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{", code)
        if not m:
            return code
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        code = code[:m.start()] + "\n" * code.count("\n", m.start(), j) + code[j:]


def expand_use(tree):
    """`a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]."""
    tree = re.sub(r"\s+", "", tree)
    m = re.match(r"^(.*?)\{(.*)\}$", tree)
    if not m:
        return [re.sub(r"as\w+$", "", tree)] if tree else []
    prefix, inner = m.group(1), m.group(2)
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    return [x for p in parts if p for x in expand_use(prefix + p)]


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}  # module path tuple -> file path
        for dp, _, fns in os.walk(src):
            for fn in fns:
                if not fn.endswith(".rs"):
                    continue
                rel = os.path.relpath(os.path.join(dp, fn), src)[:-3].split(os.sep)
                if rel[-1] == "mod":
                    rel = rel[:-1]
                if rel in (["lib"], ["main"]):
                    continue
                self.files[tuple(rel)] = os.path.join(dp, fn)

    def layers(self):
        text = strip_code(open(os.path.join(self.src, "lib.rs")).read())
        return re.findall(r"^\s*pub\s+mod\s+(\w+)\s*;", text, re.M)

    def resolve(self, here, path):
        """The module (a key of self.files) a path names, or None (std, a crate, a macro)."""
        segs = [s for s in path.split("::") if s]
        if not segs:
            return None
        if segs[0] == "crate" or segs[0] == "$crate":
            mod, rest = (), segs[1:]
        elif segs[0] == "super":
            mod, rest = here, segs
            while rest and rest[0] == "super":
                mod, rest = mod[:-1], rest[1:]
        elif segs[0] == "self":
            mod, rest = here, segs[1:]
        elif here + (segs[0],) in self.files:
            mod, rest = here, segs
        else:
            return None
        for s in rest:
            if mod + (s,) in self.files:
                mod = mod + (s,)
            else:
                break
        return mod or None

    def references(self, mod):
        """(line, path text, target module) for every path in the file of `mod`."""
        code = drop_test_blocks(strip_code(open(self.files[mod]).read()))
        refs = []
        for m in re.finditer(r"\buse\s+([^;]+);", code):
            line = code.count("\n", 0, m.start()) + 1
            for p in expand_use(m.group(1)):
                refs.append((line, p))
        use_spans = [(m.start(), m.end()) for m in re.finditer(r"\buse\s+[^;]+;", code)]
        for m in re.finditer(r"(?<![\w:])(\$?crate|super|self|[a-z_][a-z0-9_]*)((?:::[A-Za-z_][A-Za-z0-9_]*)+)", code):
            if any(a <= m.start() < b for a, b in use_spans):
                continue
            refs.append((code.count("\n", 0, m.start()) + 1, m.group(0)))
        out = []
        for line, p in refs:
            t = self.resolve(mod, p)
            if t is not None and t != mod:
                out.append((line, p, t))
        return out


def self_test():
    """The check fails on what it is for, and only on that: planted crates in a temp dir."""
    import tempfile
    lib = "pub mod low;\n\npub mod high;\n"
    cases = [
        ("clean", {"low/mod.rs": "mod a;\nmod b;\npub use a::A;\n",
                   "low/a.rs": "use super::b::B;\npub struct A(B);\n",
                   "low/b.rs": "pub struct B;\n",
                   "high.rs": "use crate::low::{A, self};\n// crate::high is fine\n"}, 0),
        ("mentions in comments, strings and tests", {
            "low.rs": '// crate::high::X\nconst S: &str = "crate::high::X";\n'
                      '#[cfg(test)]\nmod tests {\n    use crate::high::H;\n}\n',
            "high.rs": "pub struct H;\n"}, 0),
        ("an upward use", {"low.rs": "use crate::high::H;\n", "high.rs": "pub struct H;\n"}, 1),
        ("an upward path in code", {"low.rs": "fn f() { crate::high::go(); }\n",
                                    "high.rs": "pub fn go() {}\n"}, 1),
        ("an upward path in a use tree", {"low.rs": "use crate::{high::H, low};\n",
                                          "high.rs": "pub struct H;\n"}, 1),
        ("a circle of siblings", {"low/mod.rs": "mod a;\nmod b;\n",
                                  "low/a.rs": "use super::b::B;\npub struct A;\n",
                                  "low/b.rs": "pub struct B;\nfn f() { let _ = super::a::A; }\n",
                                  "high.rs": ""}, 1),
        ("a module missing from the list", {"low.rs": "", "high.rs": "", "stray.rs": ""}, 1),
    ]
    failed = 0
    for name, files, want in cases:
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "lib.rs"), "w") as f:
                f.write(lib)
            for rel, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
                with open(os.path.join(d, rel), "w") as f:
                    f.write(text)
            got = check(d, quiet=True)
        ok = got == want
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} check-imports self-test: {name}: exit {got} (want {want})")
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    here = os.path.dirname(os.path.abspath(__file__))
    return check(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "..", "src"))


def check(src, quiet=False):
    crate = Crate(src)
    order = crate.layers()
    rank = {m: i for i, m in enumerate(order)}
    problems = []
    unlisted = sorted({m[0] for m in crate.files} - set(rank))
    for m in unlisted:
        problems.append(f"src/{m}: a module not declared in src/lib.rs's layer list")
    edges = {}
    for mod, path in sorted(crate.files.items()):
        rel = os.path.relpath(path, os.path.join(src, ".."))
        for line, p, t in crate.references(mod):
            a, b = mod[0], t[0]
            if a != b and a in rank and b in rank and rank[b] > rank[a]:
                problems.append(
                    f"{rel}:{line}: `{p}`: {a} (layer {rank[a] + 1}) imports {b} (layer {rank[b] + 1}), "
                    f"declared after it in src/lib.rs: move the item down or the caller up")
            # A file may use what its own parent module declares (`super::Error`): the parent
            # is the module's face, and its `mod` lines and re-exports point back down.
            if a == b and t != mod[:len(t)]:
                edges.setdefault(mod, {}).setdefault(t, (rel, line, p))
    # circles between the files of one module (Tarjan's strongly connected components)
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(crate.files):
        if v not in index:
            visit(v)
    for comp in comps:
        names = sorted("::".join(c) for c in comp)
        ties = []
        for v in sorted(comp):
            for w, (rel, line, p) in sorted(edges.get(v, {}).items()):
                if w in comp:
                    ties.append(f"{rel}:{line} `{p}`")
        problems.append(f"a circle between {', '.join(names)}: " + "; ".join(ties))
    if quiet:
        return 1 if problems else 0
    for p in problems:
        print(p)
    if problems:
        print(f"check-imports: {len(problems)} problem(s); the order is src/lib.rs's `pub mod` list, bottom up")
        return 1
    print(f"check-imports: {len(crate.files)} files in {len(order)} layers, every import runs down, no circle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
