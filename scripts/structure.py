#!/usr/bin/env python3
"""Checks the shape of every crate of the workspace: what one reader can hold.

    scripts/structure.py              check, print what breaks a rule, exit 1 if anything does
    scripts/structure.py --report     also print every folder's graph, the longest files and functions
    scripts/structure.py --root DIR   check the workspace at DIR instead of this repository

The rules, on code that is not a test (a `#[cfg(test)]` item, a file declared by `#[cfg(test)] mod`, tests/):
- Data flows one way: inside every folder of a crate, its entries (the files beside each other and the subfolders,
  a subfolder standing for all it holds) use each other without a cycle. A folder's `mod.rs` (the crate's
  `lib.rs` or `main.rs`) is the folder itself: its children may use it and it may use them. An entry uses another
  when its code names it by a `crate::` or `super::` path, in a `use` or in an expression.
- No source file over 700 lines (tests inside it counted too: a file is read whole).
- No function over 150 lines, from its `fn` line to its closing brace.
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if "--root" in sys.argv[:-1]:
    ROOT = os.path.abspath(sys.argv[sys.argv.index("--root") + 1])
MAX_FILE_LINES = 700
MAX_FN_LINES = 150


def workspace_crates():
    """The folders of the workspace's crates, read from the members list of the root Cargo.toml."""
    text = open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8").read()
    members = re.search(r"members\s*=\s*\[(.*?)\]", text, re.S)
    crates = ["."] + re.findall(r'"([^"]+)"', members.group(1) if members else "")
    return [c for c in crates if os.path.isdir(os.path.join(ROOT, c, "src"))]


STRING = re.compile(r'b?r(#*)"(?:.|\n)*?"\1|b?"(?:\\.|[^"\\])*"', re.S)
CHAR = re.compile(r"b?'(?:\\(?:u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'\n])'")


def blank(match):
    """Keeps a match's newlines (line numbers hold) and replaces the rest by spaces."""
    return re.sub(r"[^\n]", " ", match.group(0))


def strip(code):
    """Source without comments, strings and char literals, so braces and paths are only the code's own."""
    out, i, n = [], 0, len(code)
    while i < n:
        if code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif code.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if code.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif code.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", code[i:j]))
            i = j
        else:
            m = STRING.match(code, i) if code[i] in 'rb"' else None
            if m and (code[i] == '"' or i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")):
                out.append(blank(m))
                i = m.end()
                continue
            m = CHAR.match(code, i) if code[i] in "'b" else None
            if m and (code[i] == "'" or i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")):
                out.append(blank(m))
                i = m.end()
                continue
            out.append(code[i])
            i += 1
    return "".join(out)


def item_end(code, start):
    """Where the item beginning at `start` ends: after its `;` or its outermost closing brace."""
    depth, i = 0, start
    while i < len(code):
        c = code[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
        i += 1
    return len(code)


CFG_TEST = re.compile(r"#\[cfg\((?:test|all\(test[^\]]*)\)\]")


def without_tests(code):
    """Stripped code with every `#[cfg(test)]` item blanked; also the names of the modules it declared that way."""
    test_mods = set()
    while True:
        m = CFG_TEST.search(code)
        if not m:
            return code, test_mods
        start = m.end()
        while True:  # further attributes on the same item
            rest = re.match(r"\s*#\[[^\]]*\]", code[start:])
            if not rest:
                break
            start += rest.end()
        decl = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", code[start:])
        if decl:
            test_mods.add(decl.group(1))
        end = item_end(code, start)
        code = code[: m.start()] + re.sub(r"[^\n]", " ", code[m.start() : end]) + code[end:]


class Module:
    def __init__(self, crate, path, file, test):
        self.crate, self.path, self.file, self.test = crate, path, file, test
        self.raw = open(file, encoding="utf-8").read()
        self.code, self.test_mods = without_tests(strip(self.raw))


def child_file(folder, name):
    for candidate in (os.path.join(folder, name + ".rs"), os.path.join(folder, name, "mod.rs")):
        if os.path.exists(candidate):
            return candidate
    return None


def modules_of(crate):
    """Every module file of a crate, walked from its roots by `mod name;` declarations."""
    src = os.path.join(ROOT, crate, "src")
    roots = [os.path.join(src, f) for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(src, f))]
    bins = os.path.join(src, "bin")
    if os.path.isdir(bins):
        roots += [os.path.join(bins, f) for f in sorted(os.listdir(bins)) if f.endswith(".rs")]
    found = []
    for root in roots:
        label = os.path.relpath(root, ROOT)
        stack = [(Module(label, (), root, False), os.path.dirname(root))]
        while stack:
            module, folder = stack.pop()
            found.append(module)
            for m in re.finditer(r"(?:#\[path\s*=\s*\"([^\"]+)\"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", module.code + "\n".join(f"mod {t};" for t in module.test_mods)):
                name = m.group(2)
                file = child_file(folder, name)
                if file is None:
                    continue
                test = module.test or name in module.test_mods
                child = Module(label, module.path + (name,), file, test)
                is_dir_module = os.path.basename(file) == "mod.rs"
                stack.append((child, os.path.dirname(file) if is_dir_module else os.path.join(folder, name)))
    return found


USE = re.compile(r"\buse\s+([^;]*);")
PATH = re.compile(r"\b((?:crate|super)(?:\s*::\s*(?:super|\w+))+)")


def expand_use(tree):
    """`crate::{a::b, c::{d, e}}` -> ["crate::a::b", "crate::c::d", "crate::c::e"]."""
    tree = re.sub(r"\s+", "", tree)
    brace = tree.find("{")
    if brace < 0:
        return [tree.split(" as ")[0]]
    prefix, inner = tree[:brace], tree[brace + 1 : tree.rfind("}")]
    parts, depth, current = [], 0, ""
    for c in inner:
        if c == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += (c == "{") - (c == "}")
        current += c
    parts.append(current)
    out = []
    for p in parts:
        if p:
            out += [prefix + x for x in expand_use(p)]
    return out


def references(module, is_folder):
    """The absolute module paths (as tuples of names) a module's non-test code names."""
    paths = []
    for m in USE.finditer(module.code):
        paths += expand_use(m.group(1))
    code_without_uses = USE.sub(" ", module.code)
    paths += [re.sub(r"\s+", "", m.group(1)) for m in PATH.finditer(code_without_uses)]
    # `super` of a folder's mod.rs is the folder's parent; of a file, the folder the file sits in.
    base = module.path if is_folder else module.path
    out = []
    for p in paths:
        parts = p.split("::")
        if parts[0] == "crate":
            out.append(tuple(parts[1:]))
        elif parts[0] == "super":
            here = list(base)
            while parts and parts[0] == "super":
                here = here[:-1]
                parts = parts[1:]
            out.append(tuple(here) + tuple(parts))
    return out


def check_cycles(modules):
    """Cycles among the entries of each folder; each is a list of the entries in it."""
    by_path = {m.path: m for m in modules if not m.test}
    edges = {}  # folder path -> {entry: set(entry)}
    for m in by_path.values():
        for target in references(m, os.path.basename(m.file) == "mod.rs"):
            while target and target not in by_path:
                target = target[:-1]
            common = 0
            while common < min(len(m.path), len(target)) and m.path[common] == target[common]:
                common += 1
            # The folder both sit in; an entry naming its own folder (or its folder naming it) is no edge.
            if common >= len(m.path) or common >= len(target):
                continue
            folder, a, b = m.path[:common], m.path[common], target[common]
            edges.setdefault(folder, {}).setdefault(a, set()).add(b)
    cycles = []
    for folder, graph in sorted(edges.items()):
        for component in strongly_connected(graph):
            if len(component) > 1:
                cycles.append((folder, sorted(component), graph))
    return cycles, edges


def strongly_connected(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    nodes = set(graph) | {b for bs in graph.values() for b in bs}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            out.append(component)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


FN = re.compile(r"\bfn\s+(\w+)")


def long_functions(module):
    """(name, first line, lines) of every function in a module's non-test code over the limit."""
    code, out = module.code, []
    for m in FN.finditer(code):
        body = code.find("{", m.end())
        semi = code.find(";", m.end())
        if body < 0 or (0 <= semi < body):
            continue  # a declaration without a body (a trait's)
        end = item_end(code, body)
        first = code.count("\n", 0, m.start()) + 1
        last = code.count("\n", 0, end) + 1
        if last - first + 1 > MAX_FN_LINES:
            out.append((m.group(1), first, last - first + 1))
    return out


def main():
    report = "--report" in sys.argv[1:]
    problems = []
    files = {}
    for crate in workspace_crates():
        modules = modules_of(crate)
        for m in modules:
            files[m.file] = m
        cycles, edges = check_cycles(modules)
        for folder, component, graph in cycles:
            where = os.path.join(crate, "src", *folder) if folder else os.path.join(crate, "src")
            arrows = [f"{a} -> {b}" for a in component for b in sorted(graph.get(a, ())) if b in component]
            problems.append(f"{os.path.normpath(where)}: a cycle among {', '.join(component)} ({'; '.join(arrows)})")
        if report:
            for folder, graph in sorted(edges.items()):
                where = os.path.normpath(os.path.join(crate, "src", *folder))
                for a in sorted(graph):
                    print(f"{where}: {a} -> {', '.join(sorted(graph[a]))}")
    for file, m in sorted(files.items()):
        rel = os.path.relpath(file, ROOT)
        if m.test:
            continue
        lines = m.raw.count("\n")
        if lines > MAX_FILE_LINES:
            problems.append(f"{rel}: {lines} lines (at most {MAX_FILE_LINES})")
        for name, first, length in long_functions(m):
            problems.append(f"{rel}:{first}: fn {name} is {length} lines (at most {MAX_FN_LINES})")
    if report:
        sizes = sorted(((m.raw.count("\n"), os.path.relpath(f, ROOT)) for f, m in files.items() if not m.test), reverse=True)
        print("longest files:", ", ".join(f"{p} {n}" for n, p in sizes[:10]))
    for p in problems:
        print(p)
    if problems:
        print(f"scripts/structure.py: {len(problems)} problem(s) in the crates' shape", file=sys.stderr)
        return 1
    print(f"scripts/structure.py: {len(files)} module files, no cycle, none over {MAX_FILE_LINES} lines, "
          f"no function over {MAX_FN_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
