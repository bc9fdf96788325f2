#!/usr/bin/python3
"""The include direction of the source folders (../shared/DESIGN.md, "Source
layout"): each folder's README.md says, on a line starting "Includes:", which
other folders its files may include; this script reads every `#include "..."`
of every source file and fails on an edge that line does not allow.

  check_layers.py SRC_DIR      check the tree; exit 1 naming every bad edge
  check_layers.py --self-test SRC_DIR
                               plant an upward include in a copy and expect a failure

The folders are the top-level ones with such a README (kernels/cpu and
kernels/cuda belong to kernels/). tests/, bench/ and examples/ may include
anything. An include is resolved against the including file's folder, then
against the source root, as the compiler does with the root on its path.
"""
import os
import re
import shutil
import sys
import tempfile

SOURCE = (".c", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def allowed_map(root):
    """{folder: set of folders it may include}, from the READMEs."""
    rules = {}
    for d in sorted(os.listdir(root)):
        readme = os.path.join(root, d, "README.md")
        if not os.path.isfile(readme):
            continue
        with open(readme, encoding="utf-8") as f:
            for line in f:
                if line.startswith("Includes:"):
                    rules[d] = set(re.findall(r"([a-z_]+)/", line.split("(checked")[0]))
    return rules


def folder_of(root, path):
    rel = os.path.relpath(path, root)
    return rel.split(os.sep)[0] if not rel.startswith("..") else None


def edges(root, rules):
    """Yields (file, line number, included path, from folder, to folder)."""
    for d in rules:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for name in sorted(files):
                if not name.endswith(SOURCE):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = os.path.normpath(os.path.join(dirpath, m.group(1)))
                        if not os.path.exists(target):
                            target = os.path.normpath(os.path.join(root, m.group(1)))
                        if not os.path.exists(target):
                            continue  # a generated or system header in quotes
                        to = folder_of(root, target)
                        if to and to != d:
                            yield path, n, m.group(1), d, to


def check(root):
    rules = allowed_map(root)
    if not rules:
        print("check_layers: no README.md with an 'Includes:' line under %s" % root)
        return 1
    bad, count = [], 0
    for path, n, inc, src, dst in edges(root, rules):
        count += 1
        if dst not in rules.get(src, set()):
            bad.append("%s:%d: %s/ includes %s (%s/), which %s/README.md does not allow"
                       % (os.path.relpath(path, root), n, src, inc, dst, src))
    for b in bad:
        print(b)
    print("check_layers: %d folders, %d includes across folders, %d not allowed" % (len(rules), count, len(bad)))
    return 1 if bad else 0


def self_test(root):
    """The check must be able to fail: an engine file that includes the
    executor (an upward edge) in a copy of the tree."""
    tmp = tempfile.mkdtemp()
    try:
        for d in allowed_map(root):
            shutil.copytree(os.path.join(root, d), os.path.join(tmp, d))
        with open(os.path.join(tmp, "engine", "upward.c"), "w") as f:
            f.write('#include "../executor/worker.h"\n')
        rc = check(tmp)
        print("check_layers: self-test: an upward include %s" % ("is caught" if rc == 1 else "WAS MISSED"))
        return 0 if rc == 1 else 1
    finally:
        shutil.rmtree(tmp)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--self-test":
        return self_test(sys.argv[2])
    if len(sys.argv) == 2:
        return check(sys.argv[1])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
