"""`course` command line (work in progress)."""
from __future__ import annotations

import argparse
import sys


def cmd_stubs(args) -> int:
    from course import stubs

    if args.write:
        for p in stubs.write_all(args.stage):
            print(f"wrote {p}")
        return 0
    problems = stubs.check_all(args.stage)
    for p in problems:
        print(p)
    if not problems:
        print("stubs: every stub matches its solution")
    return 1 if problems else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="course")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stubs")
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", action="store_true")
    g.add_argument("--check", action="store_true")
    s.add_argument("--stage", action="append", help="only this stage (repeatable)")
    s.set_defaults(fn=cmd_stubs)
    args = p.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
