"""Hugging Face seq2seq MT models (MarianMT / OPUS-MT, M2M100, NLLB, mBART-50) as a streaming decoder.

The adapter implements :class:`~simulst.models.base.DecoderModel` plus ``encode_text`` (a
:class:`~simulst.mt.backend.TextDecoderModel`), so the MT stage drives it with the same searchers as the
speech models: ``start`` force-decodes prompt + committed target tokens in one parallel pass, ``step`` advances
all beams in one batched call with the KV cache, ``select`` reorders the cache after a beam-search step.

Prompt and target language (``decoder_start_token_id`` then, for multilingual models, the target-language token
that ``generate`` forces as ``forced_bos_token_id``):

* Marian: ``<pad>``; multi-target OPUS-MT models select the target with a ``>>spa<<`` token in the *source*.
* M2M100: ``</s> __es__``; the source starts with ``__en__`` (``tokenizer.src_lang``).
* NLLB: ``</s> spa_Latn``; the source starts with ``eng_Latn``.
* mBART-50: ``</s> es_XX``; the source starts with ``en_XX``.

The decoder state holds a transformers ``EncoderDecoderCache`` that ``step``/``select`` update in place: a
state is consumed by the next call on it (searchers use each state once).
"""

from __future__ import annotations

import string
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from simulst.errors import ModelLoadError, OptionError
from simulst.models.base import Encoded
from simulst.models.device import torch_device
from simulst.mt.backend import NeuralMT
from simulst.types import Costs

_PUNCTUATION = set(string.punctuation) | {"¿", "¡", "«", "»", "…", "–", "—"}

# ISO 639-1 -> FLORES-200 codes of NLLB (the common ones; full codes such as "spa_Latn" pass through).
NLLB_CODES = {
    "en": "eng_Latn", "es": "spa_Latn", "ca": "cat_Latn", "fr": "fra_Latn", "pt": "por_Latn", "de": "deu_Latn",
    "it": "ita_Latn", "nl": "nld_Latn", "ru": "rus_Cyrl", "uk": "ukr_Cyrl", "pl": "pol_Latn", "cs": "ces_Latn",
    "zh": "zho_Hans", "ja": "jpn_Jpan", "ko": "kor_Hang", "ar": "arb_Arab", "hi": "hin_Deva", "tr": "tur_Latn",
    "sv": "swe_Latn", "da": "dan_Latn", "fi": "fin_Latn", "el": "ell_Grek", "ro": "ron_Latn", "hu": "hun_Latn",
    "gl": "glg_Latn", "eu": "eus_Latn", "vi": "vie_Latn", "id": "ind_Latn", "he": "heb_Hebr", "fa": "pes_Arab",
}
# ISO 639-1 -> mBART-50 codes.
MBART_CODES = {
    "en": "en_XX", "es": "es_XX", "fr": "fr_XX", "de": "de_DE", "it": "it_IT", "pt": "pt_XX", "nl": "nl_XX",
    "ru": "ru_RU", "zh": "zh_CN", "ja": "ja_XX", "ko": "ko_KR", "ar": "ar_AR", "hi": "hi_IN", "tr": "tr_TR",
    "cs": "cs_CZ", "ro": "ro_RO", "fi": "fi_FI", "pl": "pl_PL", "uk": "uk_UA", "sv": "sv_SE", "gl": "gl_ES",
}
# ISO 639-1 -> the 3-letter codes of OPUS-MT's ">>xxx<<" target tokens.
OPUS_CODES = {"es": "spa", "ca": "cat", "fr": "fra", "pt": "por", "it": "ita", "ro": "ron", "gl": "glg", "de": "deu"}


class PieceTokenizer:
    """A transformers tokenizer with the word-boundary queries the pipeline needs.

    SentencePiece marks a word start with "▁" (byte-level BPE with "Ġ"); special tokens are dropped when
    decoding and count as word starts (like ``<eos>``).
    """

    def __init__(self, hf_tokenizer: Any, eos_id: int, vocab_size: int) -> None:
        self.hf = hf_tokenizer
        self.eos_id = eos_id
        pieces = [str(p or "") for p in hf_tokenizer.convert_ids_to_tokens(list(range(vocab_size)))]
        special = set(getattr(hf_tokenizer, "all_special_ids", []) or [])
        self._starts_word = np.array(
            [i in special or p.startswith(("▁", "Ġ")) for i, p in enumerate(pieces)], dtype=bool
        )
        self._punctuation = np.array(
            [i not in special and bool(p.lstrip("▁Ġ")) and all(ch in _PUNCTUATION for ch in p.lstrip("▁Ġ"))
             for i, p in enumerate(pieces)],
            dtype=bool,
        )

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of ``tokens``, special tokens dropped; a leading word start decodes to a leading space."""
        ids = [int(t) for t in tokens]
        text = str(self.hf.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False))
        if ids and text and not text.startswith(" ") and self.starts_word(ids[0]):
            text = " " + text  # SentencePiece drops the leading "▁"; keep it so increments join with a space
        return text

    def encode(self, text: str) -> list[int]:
        """Target-side ids of ``text`` (no special tokens)."""
        return list(self.hf(text_target=text, add_special_tokens=False)["input_ids"])

    def starts_word(self, token: int) -> bool:
        """True when the piece begins a word ("▁"), or is special (``</s>``, language tokens)."""
        return bool(self._starts_word[token]) if 0 <= token < len(self._starts_word) else False

    def is_punctuation(self, token: int) -> bool:
        """True when the piece is punctuation only."""
        return bool(self._punctuation[token]) if 0 <= token < len(self._punctuation) else False


@dataclass
class Seq2SeqState:
    """Decoder state of B hypotheses.

    Attributes:
        cache: the transformers ``EncoderDecoderCache`` (self-attention keys/values of the L positions decoded
            so far, and cross-attention keys/values), batch B; updated in place.
        memory: (1, S, D) encoder states of the source.
        mask: (1, S) source attention mask.
        batch: B.
    """

    cache: Any
    memory: torch.Tensor
    mask: torch.Tensor
    batch: int


class HFSeq2SeqModel:
    """A transformers encoder-decoder MT model as a :class:`~simulst.mt.backend.TextDecoderModel`.

    Args:
        net: the loaded ``*ForConditionalGeneration`` model.
        hf_tokenizer: its tokenizer.
        source_lang, target_lang: ISO 639-1 (or the model's own) codes; needed by multilingual models.
        device: torch device.
    """

    def __init__(self, net: Any, hf_tokenizer: Any, source_lang: str | None = None, target_lang: str | None = None,
                 device: str = "cpu") -> None:
        self.device = torch_device(device)
        self.net = net.to(self.device).eval()
        config = net.config
        self.model_type = str(getattr(config, "model_type", ""))
        self.eos_id = int(config.eos_token_id)
        self.vocab_size = int(getattr(config, "decoder_vocab_size", None) or config.vocab_size)
        self.tokenizer = PieceTokenizer(hf_tokenizer, self.eos_id, self.vocab_size)
        self._hf = hf_tokenizer
        start_id = config.decoder_start_token_id
        if start_id is None:
            start_id = getattr(net.generation_config, "decoder_start_token_id", None)
        if start_id is None:
            raise ModelLoadError(f"{self.model_type} model has no decoder_start_token_id")
        self.decoder_prompt: list[int] = [int(start_id)]
        self.source_prefix = ""
        self._set_languages(source_lang, target_lang)
        max_positions = int(getattr(config, "max_position_embeddings", 512) or 512)
        self.max_length = max_positions - len(self.decoder_prompt)
        self.max_source_tokens = max_positions
        # Never generated: padding (Marian's decoder start), the decoder start itself, and language tokens.
        suppress = {int(config.pad_token_id)} if config.pad_token_id is not None else set()
        suppress |= {int(start_id)} - {self.eos_id}
        suppress |= set(self._language_token_ids()) - {self.eos_id}
        self._suppress = torch.tensor(sorted(i for i in suppress if 0 <= i < self.vocab_size), dtype=torch.long)

    # ------------------------------------------------------------------------------------ languages
    def _set_languages(self, source_lang: str | None, target_lang: str | None) -> None:
        tok = self._hf
        # NLLB checkpoints are M2M100 models with an NLLB tokenizer: test the tokenizer first.
        if "nllb" in type(tok).__name__.lower() or self.model_type == "nllb-moe":
            if not source_lang or not target_lang:
                raise OptionError("an NLLB model needs the source and target languages")
            tok.src_lang = NLLB_CODES.get(source_lang, source_lang)
            code = NLLB_CODES.get(target_lang, target_lang)
            self.decoder_prompt.append(self._token_id(code, target_lang))
        elif self.model_type == "m2m_100":
            if not source_lang or not target_lang:
                raise OptionError("an M2M100 model needs the source and target languages")
            try:
                tok.src_lang = source_lang
                token = tok.get_lang_token(target_lang)
            except (KeyError, AttributeError) as err:
                raise OptionError(f"the M2M100 model has no language {err}") from err
            self.decoder_prompt.append(self._token_id(token, target_lang))
        elif self.model_type == "mbart" and "50" in type(tok).__name__:
            if not source_lang or not target_lang:
                raise OptionError("an mBART-50 model needs the source and target languages")
            tok.src_lang = MBART_CODES.get(source_lang, source_lang)
            self.decoder_prompt.append(self._token_id(MBART_CODES.get(target_lang, target_lang), target_lang))
        elif target_lang:
            # Multi-target OPUS-MT: the target is a ">>xxx<<" token at the start of the source.
            vocab = tok.get_vocab()
            for code in (target_lang, OPUS_CODES.get(target_lang, "")):
                if code and f">>{code}<<" in vocab:
                    self.source_prefix = f">>{code}<< "
                    break

    def _token_id(self, token: str, language: str) -> int:
        token_id = self._hf.convert_tokens_to_ids(token)
        if token_id is None or token_id == self._hf.unk_token_id:
            raise OptionError(f"the MT model has no language token {token!r} for language {language!r}")
        return int(token_id)

    def _language_token_ids(self) -> list[int]:
        ids = getattr(self._hf, "lang_code_to_id", None)
        if isinstance(ids, dict):
            return [int(v) for v in ids.values()]
        return list(self.decoder_prompt[1:])

    # ------------------------------------------------------------------------------------ protocol
    @torch.inference_mode()
    def encode_text(self, text: str, costs: Costs) -> Encoded:
        """Encode ``text`` (with the model's source-language / target-selection tokens)."""
        batch = self._hf(self.source_prefix + text, return_tensors="pt", truncation=True,
                         max_length=self.max_source_tokens)
        ids = batch["input_ids"].to(self.device)
        mask = batch["attention_mask"].to(self.device)
        memory = self.net.get_encoder()(input_ids=ids, attention_mask=mask).last_hidden_state
        costs.encoder_calls += 1
        costs.encoder_frames += int(ids.shape[1])
        return Encoded(frames=memory, audio_samples=int(ids.shape[1]), extra=mask)

    def _forward(self, state: Seq2SeqState, ids: torch.Tensor, costs: Costs) -> torch.Tensor:
        from transformers.modeling_outputs import BaseModelOutput  # lazy: transformers is heavy (MT only)

        batch = ids.shape[0]
        out = self.net(
            encoder_outputs=BaseModelOutput(last_hidden_state=state.memory.expand(batch, -1, -1)),
            attention_mask=state.mask.expand(batch, -1),
            decoder_input_ids=ids,
            past_key_values=state.cache,
            use_cache=True,
        )
        costs.decoder_calls += 1
        costs.decoder_positions += int(ids.numel())
        logits = out.logits[:, -1, : self.vocab_size].float()
        if self._suppress.numel():
            logits[:, self._suppress] = -torch.inf
        return torch.log_softmax(logits, dim=-1)

    def prompt(self, enc: Encoded, costs: Costs) -> list[int]:
        """The decoder start tokens (+ the target language code where the model has one)."""
        return list(self.decoder_prompt)

    @torch.inference_mode()
    def start(
        self, enc: Encoded, prefix: Sequence[int], costs: Costs, prompt: Sequence[int] | None = None
    ) -> tuple[torch.Tensor, Seq2SeqState]:
        from transformers.cache_utils import DynamicCache, EncoderDecoderCache  # lazy: heavy, MT only

        mask = enc.extra if isinstance(enc.extra, torch.Tensor) else torch.ones(enc.frames.shape[:2], dtype=torch.long)
        state = Seq2SeqState(EncoderDecoderCache(DynamicCache(), DynamicCache()), enc.frames, mask.to(self.device), 1)
        prompt = self.decoder_prompt if prompt is None else prompt
        ids = torch.tensor([[*prompt, *(int(t) for t in prefix)]], dtype=torch.long, device=self.device)
        return self._forward(state, ids, costs)[0], state

    def expand(self, state: Seq2SeqState, batch: int) -> Seq2SeqState:
        return self.select(state, torch.zeros(batch, dtype=torch.long))

    @torch.inference_mode()
    def step(self, state: Seq2SeqState, tokens: torch.Tensor, costs: Costs) -> tuple[torch.Tensor, Seq2SeqState]:
        if tokens.shape[0] != state.batch:
            raise ValueError(f"step: {tokens.shape[0]} tokens for a state of {state.batch} hypotheses")
        logp = self._forward(state, tokens.to(self.device).long().view(-1, 1), costs)
        return logp, state

    @torch.inference_mode()
    def select(self, state: Seq2SeqState, indices: torch.Tensor) -> Seq2SeqState:
        indices = indices.to(self.device).long()
        if indices.shape[0] == state.batch and bool((indices == torch.arange(state.batch, device=self.device)).all()):
            return state
        state.cache.reorder_cache(indices)
        return Seq2SeqState(state.cache, state.memory, state.mask, int(indices.shape[0]))


def load_hf_mt(
    name_or_dir: str,
    source_lang: str | None = None,
    target_lang: str | None = None,
    device: str = "cpu",
) -> NeuralMT:
    """Load a Hugging Face seq2seq MT model (a local directory, or a hub id where a hub is reachable).

    Raises:
        ModelLoadError: the model cannot be found or is not an encoder-decoder MT model.
    """
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer  # lazy: heavy, only neural MT needs it

    path = Path(name_or_dir).expanduser()
    source = str(path) if path.exists() else name_or_dir
    if not path.exists() and (name_or_dir.count("/") != 1 or name_or_dir.startswith(("/", ".", "~"))):
        raise ModelLoadError(f"MT model {name_or_dir!r} is neither a local directory nor a hub id (owner/name)")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*sacremoses.*")
            tokenizer = AutoTokenizer.from_pretrained(source)
            net = AutoModelForSeq2SeqLM.from_pretrained(source)
    except (OSError, ValueError, KeyError, ImportError) as err:
        where = "directory" if path.exists() else "hub id (is the model hub reachable?)"
        raise ModelLoadError(f"could not load MT model {name_or_dir!r} from this {where}: {err}") from err
    if not getattr(net.config, "is_encoder_decoder", False):
        raise ModelLoadError(f"{name_or_dir!r} is not an encoder-decoder (seq2seq) MT model")
    model = HFSeq2SeqModel(net, tokenizer, source_lang, target_lang, device)
    return NeuralMT(model, name=f"hf:{name_or_dir}")
