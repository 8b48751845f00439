"""Raw text -> fairseq datasets for ETC. Used by the ``etc-prepare`` command (``etc_fairseq.cli.prepare``).

Building blocks (each usable on its own; later subcommands such as HotpotQA or WikiHop
preparation are meant to reuse them):

- :mod:`.documents`       ``Document(title, paragraphs)``, the text layout (one paragraph per line, blank line
                          between documents), length filters, the seeded train/valid split
- :mod:`.wikipedia`       streaming MediaWiki XML dump reader (``iter_pages``, ``iter_wikipedia_documents``)
- :mod:`.wikitext`        wikitext -> plain paragraphs (``wikitext_to_paragraphs``) and its markup policy
- :mod:`.sources`         any mix of dumps and text files as one filtered document stream (``iter_documents``)
- :mod:`.sample_data`     ``fetch_wikipedia_sample``: the real Wikipedia sample shipped in the gensim wheel
- :mod:`.spm`             deterministic sentencepiece training, encoding document files to pieces
- :mod:`.binarize`        fairseq-preprocess (``--only-source``) into a directory, atomically (read back with
                          :mod:`etc_fairseq.data.indexed`)
- :mod:`.mlm`             ``prepare_mlm``: the masked-LM pipeline (``etc-prepare mlm``)
- :mod:`.classification`  ``prepare_article_classification``: a CONSTRUCTED passage -> article task
- :mod:`.sentences`       ``split_sentences``: the sentence splitter (sentencex) behind ``etc-prepare pretrain``
- :mod:`.gpt2`            GPT-2 (RoBERTa) BPE files and encoding for ``etc-prepare pretrain --tokenizer gpt2``
- :mod:`.pretrain`        ``prepare_pretraining``: BERT-format sentences, one binarized item per sentence,
                          document boundaries in ``{split}.docs.npy`` (``etc-prepare pretrain``)

Submodules are not imported here, so importing one does not pull in sentencepiece or fairseq.
"""
