# GENERATED from solutions/dedup/report.py by `course stubs --write`.
# Nothing to write here: given code of stage 02 (02_data_dedup/02_data_dedup.ipynb).
"""The pipeline's report (given code): the accounting and its printed table."""

from __future__ import annotations


def accounted(report: dict) -> int:
    """malformed + filtered + exact duplicates + near duplicates + kept: must equal the input."""
    return (report["malformed"] + sum(report["filtered"].values()) + report["exact_duplicates"]
            + report["near_duplicates"] + sum(report["kept"].values()))


def format_report(report: dict) -> str:
    """The report as a printed table, one row per way a document can leave or stay."""
    rows = [("input lines", report["input_lines"]), ("malformed", report["malformed"])]
    rows += [(f"filtered: {reason}", count) for reason, count in report["filtered"].items()]
    rows += [("exact duplicates", report["exact_duplicates"]),
             (f"near duplicates ({report.get('near_duplicate_clusters', 0)} clusters)", report["near_duplicates"])]
    rows += [(f"kept: {name}", count) for name, count in report["kept"].items()]
    width = max(len(r[0]) for r in rows) + 2
    total = accounted(report)
    mark = "ok" if total == report["input_lines"] else "MISMATCH"
    out = [f"{'':<{width}}{'documents':>10}", "-" * (width + 10)]
    out += [f"{name:<{width}}{count:>10}" for name, count in rows]
    out += ["-" * (width + 10), f"{'accounted for':<{width}}{total:>10}  {mark}"]
    if "quality_profile" in report:
        out.append(f"quality filters: {report['quality_profile']} profile")
    if report.get("malformed_lines"):
        shown = ", ".join(f"{m['line']} ({m['error']})" for m in report["malformed_lines"][:5])
        more = len(report["malformed_lines"]) - 5
        out.append(f"malformed lines: {shown}" + (f", and {more} more" if more > 0 else ""))
    return "\n".join(out)
