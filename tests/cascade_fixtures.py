"""A tiny random MarianMT model built offline for the cascade tests.

A SentencePiece unigram model is trained on a few hundred lines of Python docstrings (the standard library's
own text, so nothing is downloaded), and a MarianMT model with tiny dimensions and random weights is built from a
``MarianConfig`` and saved with a ``MarianTokenizer`` (``source.spm``, ``target.spm``, ``vocab.json``) - the
layout of an OPUS-MT checkpoint, so it loads through the same code path as a real one.
"""

from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path


def docstring_lines(limit: int = 600) -> list[str]:
    """Lines of at least four words from the docstrings of a few standard-library modules."""
    import argparse
    import collections
    import os
    import pathlib
    import re
    import string
    import textwrap

    lines: list[str] = []
    for module in (os, re, collections, json, textwrap, string, pathlib, argparse, inspect):
        for obj in vars(module).values():
            doc = inspect.getdoc(obj) if callable(obj) else None
            for line in (doc or "").splitlines():
                line = line.strip()
                if len(line.split()) >= 4:
                    lines.append(line)
    return lines[:limit]


def build_tiny_marian(directory: Path, seed: int = 0, vocab_size: int = 250) -> Path:
    """Write a tiny random MarianMT checkpoint (config, weights, tokenizer files) into ``directory``."""
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    directory.mkdir(parents=True, exist_ok=True)
    lines = docstring_lines()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(directory / "sp"), vocab_size=vocab_size,
        model_type="unigram", character_coverage=1.0, bos_id=-1, eos_id=-1, unk_id=0, pad_id=-1,
        minloglevel=2, num_threads=1,
    )
    processor = spm.SentencePieceProcessor(model_file=str(directory / "sp.model"))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(processor.get_piece_size()):
        vocab.setdefault(processor.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    shutil.copy(directory / "sp.model", directory / "source.spm")
    shutil.copy(directory / "sp.model", directory / "target.spm")
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    size = len(vocab)
    config = MarianConfig(
        vocab_size=size, decoder_vocab_size=size, d_model=32, encoder_layers=2, decoder_layers=2,
        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
        max_position_embeddings=128, pad_token_id=size - 1, eos_token_id=0, decoder_start_token_id=size - 1,
        forced_eos_token_id=None,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config).eval()
    model.save_pretrained(directory)
    tokenizer = MarianTokenizer(str(directory / "source.spm"), str(directory / "target.spm"),
                                str(directory / "vocab.json"))
    tokenizer.save_pretrained(directory)
    return directory


def build_tiny_m2m100(directory: Path, marian_dir: Path, seed: int = 0) -> Path:
    """A tiny random M2M100 (multilingual: ``__en__`` source token, ``</s> __es__`` decoder prompt) that reuses
    the SentencePiece model of :func:`build_tiny_marian` with M2M100's special-token layout."""
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(marian_dir / "sp.model", directory / "sentencepiece.bpe.model")
    marian_vocab = json.loads((marian_dir / "vocab.json").read_text(encoding="utf-8"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    for piece in marian_vocab:
        vocab.setdefault(piece, len(vocab))
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = M2M100Tokenizer(str(directory / "vocab.json"), str(directory / "sentencepiece.bpe.model"),
                                src_lang="en", tgt_lang="es")
    size = max(tokenizer.lang_token_to_id.values()) + 1  # the language tokens follow the vocabulary
    config = M2M100Config(
        vocab_size=size, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=128,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
    )
    torch.manual_seed(seed)
    M2M100ForConditionalGeneration(config).eval().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory
