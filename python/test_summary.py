"""Summarises one `bazel test` run from its build-event JSON: per target, then test cases from
each test.xml (gtest and pytest both write JUnit XML), ending with 'tests: N passed, N failed'."""

from __future__ import annotations

import json
import sys
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET


def _cases(xml_path: str) -> tuple[int, int, int]:
    """(passed, failed, skipped) test cases in one JUnit XML file."""
    passed = failed = skipped = 0
    for case in ET.parse(xml_path).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            failed += 1
        elif "skipped" in kinds or case.get("status") == "notrun":
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped


def main(bep_path: str) -> int:
    targets: dict[str, str] = {}
    xmls: dict[str, str] = {}
    with open(bep_path) as f:
        for line in f:
            event = json.loads(line)
            ident = event.get("id", {})
            if "testSummary" in ident:
                targets[ident["testSummary"]["label"]] = event.get("testSummary", {}).get("overallStatus", "NO_STATUS")
            if "testResult" in ident:
                for out in event.get("testResult", {}).get("testActionOutput", []):
                    if out.get("name") == "test.xml":
                        xmls[ident["testResult"]["label"]] = urllib.parse.unquote(urllib.parse.urlparse(out["uri"]).path)
    passed = failed = skipped = 0
    for label, path in sorted(xmls.items()):
        try:
            p, f_, s = _cases(path)
        except (OSError, ET.ParseError):
            p, f_, s = 0, 1, 0  # a target that left no readable XML counts as one failure
        passed, failed, skipped = passed + p, failed + f_, skipped + s
    bad = {label: status for label, status in targets.items() if status != "PASSED"}
    print(f"bazel targets: {len(targets) - len(bad)} passed, {len(bad)} failed")
    for label, status in sorted(bad.items()):
        print(f"  {status}: {label}")
    print(f"tests: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if bad or failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
