"""What every ``etc-evaluate <dataset>`` shares: the ``--predictions`` / ``--gold`` / ``--output`` options and
printing the metrics (and writing their JSON to ``--output``, atomically), and the one-line JSON form of a
flat metrics dict."""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Mapping, Optional


def add_evaluate_arguments(p: argparse.ArgumentParser, predictions_help: str, gold_help: str,
                           many_gold: bool = False) -> None:
    """``--predictions FILE``, ``--gold FILE`` (one or more with ``many_gold``) and ``--output FILE``."""
    p.add_argument("--predictions", type=Path, required=True, help=predictions_help)
    p.add_argument("--gold", type=Path, nargs="+" if many_gold else None, required=True, help=gold_help)
    p.add_argument("--output", type=Path, default=None, help="also write the metrics JSON here")


def report_metrics(printed: str, metrics_json: str, output: Optional[Path]) -> None:
    """Print ``printed``; with ``output``, write ``metrics_json`` (one JSON document) there, atomically."""
    print(printed)
    if output is not None:
        from etc_fairseq.prepare.atomic import atomic_file

        with atomic_file(output) as f:
            f.write(metrics_json + "\n")


def format_metrics(metrics: Mapping[str, object]) -> str:
    """One JSON object on one line, float metrics rounded to 4 digits (other values as they are)."""
    return json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in metrics.items()})
