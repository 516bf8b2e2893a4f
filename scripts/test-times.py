"""Where the suite's time goes: the JUnit XML of scripts/test.sh's lanes, summed per test file.

Usage: python3 scripts/test-times.py .test-logs/*.xml [--top N]

Prints, per lane (one XML file each), its total and its slowest files, so that the lane to split or
the test to make faster is a number, not a guess. Standard library only: it runs before any venv.
"""

from __future__ import annotations

import argparse
import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def per_file(xml: Path) -> collections.Counter[str]:
    """Seconds per test file (setup, call and teardown together) in one lane's JUnit XML."""
    times: collections.Counter[str] = collections.Counter()
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = (case.get("classname") or "?").split("::")[0]
        module = name.rsplit(".", 1)[0] if name.count(".") > 1 and name.split(".")[-1][:1].isupper() else name
        times[module] += float(case.get("time") or 0)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("xml", nargs="+", type=Path)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    for xml in args.xml:
        if not xml.is_file():
            continue
        times = per_file(xml)
        print(f"\n== {xml.stem}: {sum(times.values()):,.0f} s in {len(times)} files")
        for module, seconds in times.most_common(args.top):
            print(f"   {seconds:8.1f} s  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
