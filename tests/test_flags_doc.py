"""``docs/flags.md`` is exactly what ``python -m etc_fairseq.cli.flags_doc`` generates from the dataclasses,
so the page cannot drift from the flags; and it names every flag of the model, our tasks and criterions."""

import dataclasses
from pathlib import Path

from etc_fairseq.cli.flags_doc import render

PAGE = Path(__file__).resolve().parents[1] / "docs" / "flags.md"


def test_checked_in_page_is_the_generated_one():
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/flags.md is out of date: run  python -m etc_fairseq.cli.flags_doc --out docs/flags.md"
    )


def test_page_lists_every_flag():
    from etc_fairseq.models.etc import EtcConfig
    from etc_fairseq.pretraining.task import EtcPretrainingConfig

    text = render()
    for dc in (EtcConfig, EtcPretrainingConfig):
        for f in dataclasses.fields(dc):
            if not f.name.startswith("_") and f.name not in ("data", "seed"):  # seed: fairseq's --seed
                assert f"`--{f.name.replace('_', '-')}`" in text, f.name
    for name in ("task `etc_pretraining`", "task `etc_hotpotqa`", "criterion `cpc_mlm`", "`etc_tiny`", "`etc_large`"):
        assert name in text
    assert "`--encoder-layers 2`" in text  # etc_tiny's row of the architecture table
