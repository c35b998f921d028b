"""JUnit XML from a report dict: one ``<testsuite>`` per variant, one ``<testcase>`` per gate check.

FAIL -> ``<failure>``. INCONCLUSIVE -> ``<skipped>`` (the evidence neither passes nor fails the check: CI
dashboards show it apart from a failure, while the process exit code still carries the gate's decision).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from evalsuite.report.model import check_report


_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(c: dict[str, Any]) -> dict[str, Any]:
    """Strings with the characters XML 1.0 cannot hold removed."""
    return {k: _XML_BAD.sub("", v) if isinstance(v, str) else v for k, v in c.items()}


def _case(suite: ET.Element, c: dict[str, Any]) -> None:
    c = _clean(c)
    name = f"{c['task']}[{c['slice']}] {c['check']}"
    case = ET.SubElement(suite, "testcase", name=name, classname=f"evalsuite.gate.{c['variant']}", time="0")
    detail = (f"observed={c['observed']} threshold={c['threshold']}"
              + (f" ci=[{c['ci'][0]}, {c['ci'][1]}]" if c.get("ci") else "") + f" verdict={c['verdict']}"
              + (f" n={c['n']}" if c.get("n") else "")
              + (f" more_needed={c['more_needed']}" if c.get("more_needed") is not None else ""))
    if c["verdict"] == "FAIL":
        ET.SubElement(case, "failure", message=c["reason"], type="FAIL").text = detail
    elif c["verdict"] == "INCONCLUSIVE":
        ET.SubElement(case, "skipped", message=f"INCONCLUSIVE: {c['reason']}")
    ET.SubElement(case, "system-out").text = f"{c['reason']}\n{detail}"


def render_junit(report: dict[str, Any]) -> str:
    """The XML document as a string (UTF-8 declaration included)."""
    r = check_report(report)
    checks = [_clean(c) for c in r["checks"]]
    root = ET.Element("testsuites", name=f"evalsuite {r['run_id']}", tests=str(len(checks)),
                      failures=str(sum(c["verdict"] == "FAIL" for c in checks)), errors="0",
                      skipped=str(sum(c["verdict"] == "INCONCLUSIVE" for c in checks)))
    variants = list(dict.fromkeys(c["variant"] for c in checks))
    for v in variants:
        mine = [c for c in checks if c["variant"] == v]
        suite = ET.SubElement(root, "testsuite", name=f"evalsuite.gate.{v}", tests=str(len(mine)),
                              failures=str(sum(c["verdict"] == "FAIL" for c in mine)), errors="0",
                              skipped=str(sum(c["verdict"] == "INCONCLUSIVE" for c in mine)), time="0",
                              timestamp=str(r["created"]))
        props = ET.SubElement(suite, "properties")
        for key, val in (("baseline", r["baseline"]), ("overall", r["overall"]),
                         ("model", r["model"].get("name", "")), ("fingerprint", r["model"].get("fingerprint", ""))):
            ET.SubElement(props, "property", name=key, value=str(val))
        for c in mine:
            _case(suite, c)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
