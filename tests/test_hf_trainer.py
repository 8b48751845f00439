"""The Hugging Face tools on ETC: ``transformers.Trainer`` fine-tunes ``EtcForSequenceClassification`` on real
documents (the Wikipedia sample, laid out by :class:`etc_fairseq.hf.EtcProcessor`: one global token per
sentence) with a CONSTRUCTED label, with gradient checkpointing on, and its training loss falls; the structured
records of the ``Document`` builder train a token classifier the same way."""
import re

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import etc_fairseq.hf as hf  # noqa: E402
from etc_fairseq.cli.lift import main as lift_main  # noqa: E402

#: CONSTRUCTED label: the document's first four sentences mention a year 1000-1999 (12 of the 32 documents)
YEAR = re.compile(r"\b1[0-9]{3}\b")


@pytest.fixture(scope="module")
def wiki_docs(wiki_dump):
    """The first 32 articles of the Wikipedia sample with at least four sentences: (title, first four sentences)."""
    from etc_fairseq.prepare.sentences import split_sentences
    from etc_fairseq.prepare.wikipedia import iter_wikipedia_documents

    docs = []
    for doc in iter_wikipedia_documents(wiki_dump):
        sentences = [s for p in doc.paragraphs for s in split_sentences(p)]
        if len(sentences) >= 4:
            docs.append((doc.title, sentences[:4]))
        if len(docs) == 32:
            return docs
    return docs


def tiny_bert(path, texts) -> None:
    """CONSTRUCTED: a tiny random BertForMaskedLM at ``path`` with a 600-piece WordPiece vocabulary trained on
    ``texts`` (a stand-in for a downloaded BERT; also used by tests/test_docs_huggingface.py)."""
    from tokenizers import BertWordPieceTokenizer

    path.mkdir(parents=True)
    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train_from_iterator(texts, vocab_size=600, min_frequency=1)
    wp.save_model(str(path))
    vocab = (path / "vocab.txt").read_text().splitlines()
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=512)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(config).save_pretrained(path)


@pytest.fixture(scope="module")
def etc_dir(wiki_docs, tmp_path_factory):
    """:func:`tiny_bert` on the documents, lifted by ``etc-lift --format hf``."""
    root = tmp_path_factory.mktemp("hf_trainer")
    tiny_bert(root / "bert", [s for _, doc in wiki_docs for s in doc])
    out = root / "etc"
    assert lift_main([str(root / "bert"), "--format", "hf", "--out", str(out), "-q", "--local-radius", "8",
                      "--relative-pos-max-distance", "4"]) == 0
    return out


def test_trainer_fine_tunes_a_long_document_classifier_and_the_loss_falls(etc_dir, wiki_docs, tmp_path):
    processor = hf.EtcProcessor.from_pretrained(etc_dir, max_sentence_pieces=48)
    examples = processor.encode_documents([doc for _, doc in wiki_docs], return_tensors=None)
    for example, (_, doc) in zip(examples, wiki_docs):
        example["labels"] = int(bool(YEAR.search(" ".join(doc))))
    assert sum(e["labels"] for e in examples) == 12
    assert min(len(e["input_ids"]) for e in examples) > 64  # long inputs, one global token per sentence (+ CLS)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        etc_dir, num_labels=2, classification_head_input="global_cls", id2label={0: "no_year", 1: "year"})
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_train_epochs=8, learning_rate=1e-2,
        logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, seed=0, dataloader_num_workers=0,
        gradient_checkpointing=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=examples, data_collator=processor.collator)
    trainer.train()
    assert model.etc.encoder.cfg.checkpoint_activations  # the Trainer switched the encoder's checkpointing on
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 32
    first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
    assert last < 0.5 * first, (first, last)
    model.eval()
    with torch.no_grad():
        batch = processor.collator([{k: v for k, v in e.items() if k != "labels"} for e in examples])
        predicted = model(**batch).logits.argmax(-1)
    accuracy = (predicted == torch.tensor([e["labels"] for e in examples])).float().mean().item()
    assert accuracy > 20 / 32 + 0.2  # above always answering the majority class (20 / 32)
    model.save_pretrained(tmp_path / "classifier")
    again = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "classifier").eval()
    assert again.config.id2label == {0: "no_year", 1: "year"}
    with torch.no_grad():
        assert torch.equal(again(**batch).logits.argmax(-1), predicted)


def test_trainer_on_document_builder_records(etc_dir, wiki_docs, tmp_path):
    """Global-level labels (one class per sentence token, CONSTRUCTED: whether that sentence mentions a year)."""
    from etc_fairseq.finetune.structured.builder import Document

    records = []
    for title, sentences in wiki_docs:
        doc = Document(title)
        para = doc.paragraph()
        for s in sentences:
            para.sentence(s, label="year" if YEAR.search(s) else "none")
        records.append(doc)
    processor = hf.EtcProcessor.from_pretrained(etc_dir)
    examples = processor.encode_records(records, label_level="global", classes=["none", "year"], return_tensors=None)
    assert examples[0]["labels"][:2] == [-100, -100]  # the CLS and the paragraph token carry no label
    model = transformers.AutoModelForTokenClassification.from_pretrained(
        etc_dir, num_labels=2, token_classification_input="global")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, num_train_epochs=4, learning_rate=1e-2,
        logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, seed=0, dataloader_num_workers=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=examples, eval_dataset=examples,
                                   data_collator=processor.collator)
    before = trainer.evaluate()["eval_loss"]
    trainer.train()
    after = trainer.evaluate()["eval_loss"]  # the loss over every training record, without dropout
    assert after < 0.8 * before, (before, after)
