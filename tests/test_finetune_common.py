"""What the fine-tuning datasets share: the converter pipeline (etc_fairseq/finetune/common/convert.py), the
metrics-reduction helper every criterion uses (etc_fairseq/criterion_metrics.py) and the subcommand
registry's discovery of dataset folders (etc_fairseq/commands.py)."""
import json
import math

import numpy as np
import pytest


def _tokenizer(tmp_path):
    from fairseq.data import Dictionary

    from etc_fairseq.prepare.tokenizer import WordPieceTokenizer
    from etc_fairseq.tokenization import SourceTokenizer

    d = Dictionary()
    for w in ("the", "tower", "paris"):
        d.add_symbol(w)
    path = tmp_path / "src" / "dict.txt"
    path.parent.mkdir()
    d.save(str(path))
    whole_words = SourceTokenizer("sentencepiece", lambda text: ([text], [(0, len(text))]))
    return WordPieceTokenizer("spm", Dictionary.load(str(path)), whole_words, dict_path=path)


def _example(n_long, n_global):
    return {
        "long_tokens": np.arange(4, 4 + n_long),
        "global_tokens": np.full(n_global, 4),
        "global_types": np.ones(n_global, dtype=np.int64),
    }


def test_converter_pipeline_writes_dictionary_splits_and_one_summary(tmp_path):
    from etc_fairseq.data.structured import CORE_FIELDS, read_meta, read_side
    from etc_fairseq.finetune.common.convert import SUMMARY_FILE, prepared_directory, write_split, write_summary

    tok = _tokenizer(tmp_path)
    specs = [CORE_FIELDS[n] for n in ("long_tokens", "global_tokens", "global_types")]
    out = tmp_path / "out"
    with prepared_directory(out, tok) as tmp:
        assert not out.exists()  # nothing at the destination until the block succeeds
        examples = ((_example(n, 2), {"id": f"ex{n}"}) for n in (3, 5))
        writer = write_split(tmp, "valid", specs, examples, log_every=1)
        assert writer.num_examples == 2
        writer.finalize(dropped=0)
        write_summary(tmp, "demo", tok, {"valid": {"examples": 2}}, max_long_len=8)
    assert (out / "dict.txt").read_bytes() == tok.dict_path.read_bytes()
    assert read_meta(out, "valid")["num_examples"] == 2 and read_meta(out, "valid")["dropped"] == 0
    assert [r["id"] for r in read_side(out, "valid")] == ["ex3", "ex5"]
    summary = json.loads((out / SUMMARY_FILE).read_text())
    bos = tok.dictionary.bos()
    assert summary == {"dataset": "demo", "max_long_len": 8, "tokenizer": "spm", "tokenizer_stats": str(tok.stats),
                       "global_token_ids": {t: bos for t in ("FIXED_BLOCK", "CLS", "SENTENCE", "PARAGRAPH", "CONTEXT",
                                                             "TITLE", "CANDIDATE", "CPC_MASK", "VDOM_NODE")},
                       "splits": {"valid": {"examples": 2}}}


def test_converter_pipeline_leaves_nothing_behind_and_checks_split_names(tmp_path):
    from etc_fairseq.data.structured import CORE_FIELDS
    from etc_fairseq.finetune.common.convert import check_split_names, prepared_directory, write_split

    tok = _tokenizer(tmp_path)
    out = tmp_path / "out"

    def examples():
        yield _example(3, 2), None
        raise ValueError("data.json: record 1: field 'question' must be a string")

    with pytest.raises(ValueError, match="record 1"):
        with prepared_directory(out, tok) as tmp:
            write_split(tmp, "train", [CORE_FIELDS["long_tokens"]], examples())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no output, no temporary directory
    with pytest.raises(ValueError, match=r"at least one input split \(--train"):
        check_split_names([])
    with pytest.raises(ValueError, match="must be unique"):
        check_split_names(["valid", "valid"])
    with pytest.raises(ValueError, match="no dots or slashes"):
        check_split_names(["dev.v1"])


def test_reduce_metrics_helper_sums_workers_then_divides():
    from fairseq import metrics

    from etc_fairseq.criterion_metrics import NATS_TO_BITS, Ratio, log_mean_loss, log_ratios, total

    logs = [
        {"loss": 3.0 * math.log(2), "sample_size": 2, "correct": 1, "count": 3, "loss_sum": math.log(2), "none": 0},
        {"loss": 1.0 * math.log(2), "sample_size": 2, "correct": 2, "count": 1, "loss_sum": 0.0},
    ]
    assert total(logs, "correct") == 3.0 and total(logs, "missing") == 0.0
    with metrics.aggregate(new_root=True) as agg:
        log_mean_loss(logs)
        log_ratios(logs, {
            "acc": Ratio("correct", "count", 100.0),  # 3 of 4, not the mean of 1/3 and 2/1
            "sum_loss": Ratio("loss_sum", "count", NATS_TO_BITS),
            "empty": Ratio("correct", "none"),
            "empty_zero": Ratio("correct", "none", empty=0.0),
        })
        values = agg.get_smoothed_values()
    assert values["loss"] == pytest.approx(1.0)  # (3 + 1) bits over 4 samples
    assert values["acc"] == 75.0 and values["sum_loss"] == 0.25
    assert math.isnan(values["empty"]) and values["empty_zero"] == 0.0


def test_every_dataset_folder_provides_each_role():
    import importlib

    from etc_fairseq.commands import DATASET_ROLES, dataset_modules, finetune_datasets

    assert finetune_datasets() == ["hotpotqa", "nextsent", "nq", "openkp", "structured", "wikihop"]
    for role in ("schema", "convert", "task", "criterion", "decode", "metrics"):
        for name in dataset_modules(role):
            importlib.import_module(name)
    for module_role, attribute in DATASET_ROLES.values():
        for name in dataset_modules(module_role):
            assert hasattr(importlib.import_module(name), attribute), (name, attribute)


def test_predict_help_shows_the_device_default(capsys):
    import torch

    from etc_fairseq.cli.predict import main

    with pytest.raises(SystemExit):
        main(["hotpotqa", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    here = "cuda" if torch.cuda.is_available() else "cpu"
    assert f"--device DEVICE cpu, cuda or cuda:N (default: cuda when a GPU is visible, else cpu; here {here})" in help_text


def test_record_fields_messages_name_where_field_expected_and_got():
    # the one field checker every dataset schema uses
    from etc_fairseq.finetune.common.fields import RecordFields
    from etc_fairseq.prepare.documents import InputFormatError

    r = RecordFields("f.json: record 3")
    rec = r.record({"id": "q1", "n": True, "xs": ["a", ""], "opt": None, "f": 1})
    r.identify("id", r.get(rec, "id", str, "a non-empty string", check=bool))
    assert r.where == "f.json: record 3 (id q1)"
    assert r.get(rec, "f", float, "a number") == 1 and r.get(rec, "opt", str, "a string", default=None) is None
    assert r.get(rec, "absent", int, "an integer", default=-1) == -1
    cases = [
        (lambda: r.get(rec, "n", int, "an integer"), "field 'n': expected an integer, got true"),  # a bool is no int
        (lambda: r.get(rec, "absent", str, "a string"), "field 'absent': expected a string, got nothing"),
        (lambda: r.get(rec, "opt", str, "a string"), "field 'opt': expected a string, got null"),
        (lambda: r.str_list(rec, "xs", non_empty_items=True), "field 'xs[1]': expected a non-empty string, got \"\""),
        (lambda: r.get(rec, "id", str, "x", check=lambda v: len(v) > 5), "field 'id': expected x, got \"q1\""),
        (lambda: r.get({"s": "y" * 200}, "s", int, "an int"), "got \"" + "y" * 76 + "..."),
        (lambda: RecordFields("g:2").record([1]), "g:2: expected a JSON object, got [1]"),
    ]
    for call, message in cases:
        with pytest.raises(InputFormatError) as e:
            call()
        assert message in str(e.value) and "\n" not in str(e.value), str(e.value)
        assert str(e.value).startswith(("f.json: record 3 (id q1): field ", "g:2"))
