"""The ETC encoder as a plain ``nn.Module``: embeddings -> N x :class:`~.layer.EtcLayer` -> long and
global features. No fairseq; :mod:`etc_fairseq.models.etc` wraps it as the fairseq ``etc`` model.

Inputs of :meth:`EtcEncoder.forward` (all optional except ``long_tokens``):

- ``long_tokens``   int64 [batch, long_len]: the long input (word pieces), padded with ``padding_idx``.
- ``global_tokens`` int64 [batch, global_len]: vocabulary ids of the global tokens, padded likewise.
- ``global_types``  int64 [batch, global_len]: :class:`~etc_fairseq.structure.global_tokens.GlobalTokenType`.
- ``structure``     either a dict of compact int64 structure ids (``long_segment``, ``global_parent``,
  ``long_context``, ``global_context``, ``long_example``, ``global_example``, ``long_links``,
  ``global_hard_g2l``), turned
  into the four masks and label tensors by :func:`etc_fairseq.structure.builders.build_structure`; or
  an already built :class:`~etc_fairseq.attention.GlobalLocalStructure` (e.g. official ETC's masks
  and relative ids), used as given.
- ``segment_ids`` / ``global_segment_ids`` int64 [batch, long_len] / [batch, global_len]: rows of the
  segment embedding table (only with ``segment_vocab_size > 0``; default ``long_segment_id`` /
  ``global_segment_id``).
- ``long_extra`` / ``global_extra`` float [batch, len, dim]: added to the embeddings before the
  embedding LayerNorm (task input features, e.g. OpenKP's visual features).

With no global tokens given, the encoder builds fixed-block global tokens itself: one global token
(id ``fixed_block_token_id``) per ``fixed_block_len`` long tokens (the paper's "fixed blocks").

The attention (:attr:`EtcEncoder.backend`): with FlexAttention, :meth:`EtcEncoder.forward` builds ONE
:class:`~etc_fairseq.attention.flex.FlexPlan` per batch from the compact structure ids (no dense mask), pads
the hidden states once to the plan's block-aligned lengths, shares the plan with every layer and cuts the
outputs back; with the blocked kernel it builds the dense masks and labels once. Either way the inputs are
validated once here and the layers trust them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from etc_fairseq.attention import GlobalLocalStructure
from etc_fairseq.errors import ConfigError, InputFormatError
from etc_fairseq.attention.flex import FlexPlan, attention_backend, flex_plan_from_structure
from etc_fairseq.structure.builders import (
    REQUIRED_STRUCTURE_LABELS,
    STRUCTURE_KEYS,
    StructureIds,
    dense_structure,
    fixed_block_ids,
    structure_ids,
)
from etc_fairseq.structure.flex_plan import flex_plan
from etc_fairseq.structure.global_tokens import NUM_GLOBAL_TOKEN_TYPES, GlobalTokenType
from etc_fairseq.structure.labels import RelativeLabelVocab
from etc_fairseq.tokenization import read_source_token_rows

from ..tracing import static_graph
from .config import EtcEncoderConfig, as_encoder_config
from .embeddings import PaddingAwarePositions, init_bert_params
from .io import load_weights, read_config, save_pretrained
from .layer import EtcLayer, pad_tokens

logger = logging.getLogger(__name__)


def label_vocab_from_config(cfg) -> RelativeLabelVocab:
    """The model's relative-label vocabulary, derived from its config (never stored separately)."""
    names = tuple(n.strip() for n in str(cfg.relative_structure_labels).split(",") if n.strip())
    missing = [n for n in REQUIRED_STRUCTURE_LABELS if n not in names]
    if missing:
        raise ConfigError(
            f"relative_structure_labels={cfg.relative_structure_labels!r} lacks {missing}: the structure "
            f"builders assign all of {list(REQUIRED_STRUCTURE_LABELS)}; extra labels may be appended"
        )
    return RelativeLabelVocab(cfg.relative_pos_max_distance, names)


def relative_table_rows(cfg, vocab: RelativeLabelVocab) -> int:
    """Rows of the relative tables: ``relative_vocab_size`` if set (it must hold every label), else
    the vocabulary's size."""
    rows = int(cfg.relative_vocab_size or 0)
    if rows and rows < vocab.size:
        raise ConfigError(
            f"relative_vocab_size={rows} is smaller than the {vocab.size} relative labels (2k+1 = "
            f"{vocab.num_position_labels} positions + {len(vocab.structure_labels)} structure labels)"
        )
    return rows or vocab.size


@dataclass
class EtcEncoderOutput:
    """What :meth:`EtcEncoder.forward` returns.

    long_features float [batch, long_len, dim]; global_features float [batch, global_len, dim];
    long_padding_mask / global_padding_mask bool [batch, long_len] / [batch, global_len] (True =
    padding); global_tokens / global_types int64 [batch, global_len] (the fixed-block ones when none
    were given); structure: the masks and labels used; inner_states: every layer's (long, global)
    input and the last output, with ``return_all_hiddens``. ``long_features`` / ``global_features`` is None
    when the encoder computes only the other side in its last layer (:meth:`EtcEncoder.keep_final_outputs`).
    """

    long_features: Optional[torch.Tensor]
    global_features: Optional[torch.Tensor]
    long_padding_mask: torch.Tensor
    global_padding_mask: torch.Tensor
    global_tokens: torch.Tensor
    global_types: torch.Tensor
    structure: Union[GlobalLocalStructure, FlexPlan]
    inner_states: List[Tuple[torch.Tensor, torch.Tensor]] = field(default_factory=list)


class EtcEncoder(nn.Module):
    """Embeddings and the layer stack. See the module docstring.

    Args:
        cfg: the model's fields (an :class:`EtcEncoderConfig`, or anything with its attributes, e.g.
            fairseq's ``EtcConfig``: :func:`~.config.as_encoder_config` copies them).
        vocab_size: rows of the token embedding table.
        padding_idx: the padding token id.
        fixed_block_token_id: the id of the global tokens the encoder makes when none are given.
    """

    def __init__(self, cfg: EtcEncoderConfig, vocab_size: int, padding_idx: int, fixed_block_token_id: int):
        super().__init__()
        self.cfg = cfg = as_encoder_config(cfg)
        self.vocab_size = int(vocab_size)
        self.padding_idx = int(padding_idx)
        self.fixed_block_token_id = int(fixed_block_token_id)
        #: the model's token row of each id of the model it was converted from, where the rows were reordered
        #: (Google's released ETC through etc-lift); None: token ids are rows (see :meth:`from_pretrained`)
        self.source_token_rows: Optional[Tuple[int, ...]] = None
        self.label_vocab = label_vocab_from_config(cfg)
        self.num_relative_rows = relative_table_rows(cfg, self.label_vocab)
        dim = cfg.encoder_embed_dim
        emb = cfg.embedding_size or dim
        self.embed_tokens = nn.Embedding(self.vocab_size, emb, self.padding_idx)
        # ALBERT-style: a narrower token table projected to the model width (tokens only).
        self.embed_tokens_proj = nn.Linear(emb, dim) if emb != dim else None
        # RoBERTa-compatible learned positions (row = position + padding_idx + 1), long input only.
        self.embed_positions = (
            PaddingAwarePositions(cfg.max_positions, dim, self.padding_idx) if cfg.use_absolute_positions else None
        )
        # Official ETC's absolute positions: row = index in the sequence, one table per side.
        n_index = cfg.index_position_embeddings
        self.embed_long_index_positions = nn.Embedding(n_index, dim) if n_index else None
        self.embed_global_index_positions = nn.Embedding(n_index, dim) if n_index else None
        self.embed_segments = nn.Embedding(cfg.segment_vocab_size, dim) if cfg.segment_vocab_size else None
        self.embed_global_types = (
            None if cfg.no_global_type_embeddings else nn.Embedding(NUM_GLOBAL_TOKEN_TYPES, dim)
        )
        self.layernorm_embedding = nn.LayerNorm(dim, eps=cfg.layer_norm_eps)
        self.layernorm_embedding_global = (
            nn.LayerNorm(dim, eps=cfg.layer_norm_eps) if cfg.separate_embedding_layer_norm else None
        )
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(EtcLayer(cfg, self.num_relative_rows) for _ in range(cfg.encoder_layers))
        #: The attention (default ``cfg.attention_backend``): "auto" (FlexAttention on CUDA, the blocked
        #: kernel elsewhere), or any ``impl`` of :func:`etc_fairseq.attention.global_local_attention` ("flex",
        #: "blocked", "dense", ...). FlexAttention applies no attention dropout.
        self.backend = str(cfg.attention_backend)
        if self.embed_tokens.weight.device.type != "meta":  # meta: shapes only (parameter counting)
            self.apply(init_bert_params)

    # -- inputs -------------------------------------------------------------------------------------
    def prepare_inputs(
        self,
        long_tokens: torch.Tensor,
        global_tokens: Optional[torch.Tensor] = None,
        global_types: Optional[torch.Tensor] = None,
        structure: Optional[Union[Dict[str, torch.Tensor], GlobalLocalStructure]] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, GlobalLocalStructure]:
        """Fill in fixed-block global tokens if none are given and build the masks and labels.

        long_tokens int64 [batch, long_len]; global_tokens/global_types int64 [batch, global_len] or None;
        structure: dict of compact int64 ids, a built GlobalLocalStructure, or None.
        Returns (global_tokens, global_types, GlobalLocalStructure).
        """
        global_tokens, global_types, s = self.structure_inputs(long_tokens, global_tokens, global_types, structure)
        return global_tokens, global_types, s if isinstance(s, GlobalLocalStructure) else dense_structure(s)

    def structure_inputs(
        self,
        long_tokens: torch.Tensor,
        global_tokens: Optional[torch.Tensor] = None,
        global_types: Optional[torch.Tensor] = None,
        structure: Optional[Union[Dict[str, torch.Tensor], GlobalLocalStructure]] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, Union[StructureIds, GlobalLocalStructure]]:
        """:meth:`prepare_inputs` up to the validated structure: the compact ids
        (:class:`~etc_fairseq.structure.builders.StructureIds`), or the given built structure, validated."""
        cfg = self.cfg
        pad = self.padding_idx
        if long_tokens.dim() != 2:
            raise InputFormatError(f"src_tokens must be int64 [batch, long_len], got shape {tuple(long_tokens.shape)}")
        # Lengths are capped only by absolute position tables (relative positions take any length):
        # the RoBERTa-style table here, the index tables in _index_positions.
        if cfg.use_absolute_positions and long_tokens.size(1) > cfg.max_positions:
            raise InputFormatError(
                f"long input of length {long_tokens.size(1)} exceeds max_positions={cfg.max_positions} "
                "(--max-positions), the size of the absolute position table (use_absolute_positions=True)"
            )
        long_padding_mask = long_tokens.eq(pad)
        built = structure if isinstance(structure, GlobalLocalStructure) else None
        ids = {} if built is not None else dict(structure or {})
        unknown = set(ids) - set(STRUCTURE_KEYS)
        if unknown:
            raise InputFormatError(f"unknown structure keys {sorted(unknown)}; expected a subset of {STRUCTURE_KEYS}")
        if global_tokens is None:
            if global_types is not None:
                raise InputFormatError("global_types given without global_tokens")
            if built is not None:
                raise InputFormatError("a built GlobalLocalStructure needs its global_tokens and global_types")
            long_segment, _, global_padding_mask = fixed_block_ids(long_padding_mask, cfg.fixed_block_len)
            ids.setdefault("long_segment", long_segment)
            global_tokens = torch.full_like(global_padding_mask, self.fixed_block_token_id, dtype=torch.long)
            global_tokens = global_tokens.masked_fill(global_padding_mask, pad)
            global_types = torch.full_like(global_tokens, int(GlobalTokenType.FIXED_BLOCK))
        else:
            if global_types is None:
                raise InputFormatError("global_tokens given without global_types")
            if global_tokens.shape != global_types.shape or global_tokens.size(0) != long_tokens.size(0):
                raise InputFormatError(
                    f"global_tokens {tuple(global_tokens.shape)} and global_types {tuple(global_types.shape)} "
                    f"must both be [batch={long_tokens.size(0)}, global_len]"
                )
            global_padding_mask = global_tokens.eq(pad)
        if built is None:
            return global_tokens, global_types, structure_ids(
                long_padding_mask=long_padding_mask,
                global_padding_mask=global_padding_mask,
                vocab=self.label_vocab,
                local_radius=cfg.local_radius,
                hard_g2l=cfg.hard_g2l,
                hard_l2g=cfg.hard_l2g,
                **ids,
            )
        if (built.long_len, built.global_len) != (long_tokens.size(1), global_tokens.size(1)):
            raise InputFormatError(
                f"structure is for long_len={built.long_len}, global_len={built.global_len}; the input has "
                f"{long_tokens.size(1)} and {global_tokens.size(1)}"
            )
        built.validate(long_tokens.size(0), long_tokens.size(1), global_tokens.size(1))
        return global_tokens, global_types, built

    def embed(
        self,
        long_tokens: torch.Tensor,
        global_tokens: torch.Tensor,
        global_types: torch.Tensor,
        long_extra: Optional[torch.Tensor] = None,
        global_extra: Optional[torch.Tensor] = None,
        segment_ids: Optional[torch.Tensor] = None,
        global_segment_ids: Optional[torch.Tensor] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """long_tokens int64 [batch, long_len], global_tokens/global_types int64 [batch, global_len]
        -> (float [batch, long_len, dim], float [batch, global_len, dim]).

        ``long_extra`` / ``global_extra`` float [batch, len, dim] and the segment ids: see the module
        docstring."""
        x_long = self._token_embeddings(long_tokens)
        if self.embed_positions is not None:
            x_long = x_long + self.embed_positions(long_tokens)
        x_global = self._token_embeddings(global_tokens)
        if self.embed_global_types is not None:
            _check_global_types(global_types, self.embed_global_types.num_embeddings)
            x_global = x_global + self.embed_global_types(global_types)
        if self.embed_long_index_positions is not None:
            x_long = x_long + self._index_positions(self.embed_long_index_positions, x_long.shape[1], "long")
            x_global = x_global + self._index_positions(self.embed_global_index_positions, x_global.shape[1], "global")
        if self.embed_segments is not None:
            if segment_ids is None:
                segment_ids = torch.full_like(long_tokens, self.cfg.long_segment_id)
            if global_segment_ids is None:
                global_segment_ids = torch.full_like(global_tokens, self.cfg.global_segment_id)
            x_long = x_long + self.embed_segments(segment_ids)
            x_global = x_global + self.embed_segments(global_segment_ids)
        elif segment_ids is not None or global_segment_ids is not None:
            raise InputFormatError("segment ids given but the model has no segment embeddings (segment_vocab_size=0)")
        if long_extra is not None:
            x_long = x_long + long_extra.to(x_long.dtype)
        if global_extra is not None:
            x_global = x_global + global_extra.to(x_global.dtype)
        global_norm = self.layernorm_embedding_global or self.layernorm_embedding
        x_long = self.dropout(self.layernorm_embedding(x_long))
        x_global = self.dropout(global_norm(x_global))
        return x_long, x_global

    def _index_positions(self, table: nn.Embedding, length: int, side: str) -> torch.Tensor:
        """float [1, length, dim]: rows 0 .. length-1 of ``table``."""
        if length > table.num_embeddings:
            raise InputFormatError(
                f"{side} input of length {length} exceeds index_position_embeddings={table.num_embeddings} "
                "(--index-position-embeddings), the size of the absolute position tables"
            )
        return table.weight[:length].unsqueeze(0)

    def _token_embeddings(self, tokens: torch.Tensor) -> torch.Tensor:
        """int64 [batch, len] -> float [batch, len, dim] (projected when the table is narrower)."""
        x = self.embed_tokens(tokens)
        return self.embed_tokens_proj(x) if self.embed_tokens_proj is not None else x

    @property
    def final_outputs(self) -> Tuple[str, ...]:
        """The sides ("long", "global") whose features the last layer computes."""
        return self.layers[-1].outputs

    def keep_final_outputs(self, sides: Sequence[str]) -> None:
        """Let the last layer compute only ``sides`` and remove the parameters only the other side's
        last-layer outputs use (:meth:`etc_fairseq.encoder.layer.EtcLayer.keep_outputs`); the other
        side's features are then None in the output. For a fine-tuning task that reads one side only."""
        self.layers[-1].keep_outputs(sides)

    # -- forward ------------------------------------------------------------------------------------
    def attention_impl(self, device: torch.device) -> str:
        """What :attr:`backend` means for a batch on ``device`` in the current mode ("flex", "blocked", ...)."""
        impl = attention_backend(device) if self.backend == "auto" else self.backend
        p = self.cfg.attention_dropout if self.training else 0.0
        if impl == "flex" and p > 0.0 and not static_graph():
            _log_once(f"attention_dropout={p} is not applied: FlexAttention has no attention dropout (training "
                      "without it was measured not to hurt, docs/gpu.md); attention_backend=blocked applies it")
        return impl

    def attention_structure(
        self, structure: Union[StructureIds, GlobalLocalStructure], impl: str
    ) -> Union[GlobalLocalStructure, FlexPlan]:
        """What the layers read for ``impl``: a :class:`~etc_fairseq.attention.flex.FlexPlan` for "flex"
        (from the compact ids: no dense mask), else the built masks and labels."""
        if impl == "flex":
            split_kv = self.layers[0].self_attn.split_kv if len(self.layers) else True
            if isinstance(structure, StructureIds):
                return flex_plan(structure, split_kv)
            return flex_plan_from_structure(structure, split_kv)
        return structure if isinstance(structure, GlobalLocalStructure) else dense_structure(structure)

    def run_layers(
        self, x_long: torch.Tensor, x_global: torch.Tensor, structure: Union[GlobalLocalStructure, FlexPlan],
        return_all_hiddens: bool = False, impl: Optional[str] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, List[Tuple[torch.Tensor, torch.Tensor]]]:
        """The layer stack on embedded inputs: float [batch, long_len, dim] and [batch, global_len, dim]
        -> the same shapes, plus every layer's (long, global) input when ``return_all_hiddens``.
        ``structure`` / ``impl``: see :meth:`etc_fairseq.encoder.layer.EtcSelfAttention.forward`."""
        inner_states = [(x_long, x_global)] if return_all_hiddens else []
        for layer in self.layers:
            if self.cfg.checkpoint_activations and self.training and torch.is_grad_enabled():
                # Non-reentrant checkpointing restores the RNG state, so dropout masks (and therefore
                # outputs and gradients) are identical to the non-checkpointed run.
                x_long, x_global = checkpoint(layer, x_long, x_global, structure, impl, use_reentrant=False)
            else:
                x_long, x_global = layer(x_long, x_global, structure, impl)
            if return_all_hiddens:
                inner_states.append((x_long, x_global))
        return x_long, x_global, inner_states

    def forward(
        self,
        long_tokens: torch.Tensor,
        global_tokens: Optional[torch.Tensor] = None,
        global_types: Optional[torch.Tensor] = None,
        structure: Optional[Union[Dict[str, torch.Tensor], GlobalLocalStructure]] = None,
        *,
        segment_ids: Optional[torch.Tensor] = None,
        global_segment_ids: Optional[torch.Tensor] = None,
        long_extra: Optional[torch.Tensor] = None,
        global_extra: Optional[torch.Tensor] = None,
        return_all_hiddens: bool = False,
    ) -> EtcEncoderOutput:
        """See the module docstring for the inputs; returns an :class:`EtcEncoderOutput`."""
        impl = self.attention_impl(long_tokens.device)
        global_tokens, global_types, ids = self.structure_inputs(long_tokens, global_tokens, global_types, structure)
        attention = self.attention_structure(ids, impl)
        x_long, x_global = self.embed(
            long_tokens, global_tokens, global_types, long_extra, global_extra, segment_ids, global_segment_ids
        )
        L, G = x_long.shape[1], x_global.shape[1]
        if isinstance(attention, FlexPlan):  # once for every layer: the plan's block-aligned lengths
            x_long = pad_tokens(x_long, attention.layout.long_pad)
            x_global = pad_tokens(x_global, attention.layout.global_pad)
        x_long, x_global, inner_states = self.run_layers(x_long, x_global, attention, return_all_hiddens, impl)
        cut = [(_cut(a, L), _cut(b, G)) for a, b in inner_states]
        return EtcEncoderOutput(
            long_features=_cut(x_long, L),
            global_features=_cut(x_global, G),
            long_padding_mask=long_tokens.eq(self.padding_idx),
            global_padding_mask=global_tokens.eq(self.padding_idx),
            global_tokens=global_tokens,
            global_types=global_types,
            structure=attention,
            inner_states=cut,
        )

    # -- files --------------------------------------------------------------------------------------
    def save_pretrained(self, directory) -> None:
        """Write ``model.safetensors`` and ``config.json`` into ``directory`` (see :mod:`.io`)."""
        save_pretrained(self, directory)

    @classmethod
    def from_pretrained(cls, directory, map_location: str = "cpu") -> "EtcEncoder":
        """Load an encoder written by :meth:`save_pretrained`, in eval mode (see :mod:`.io`). When the directory
        holds the tokenizer description ``etc-lift`` writes, :attr:`source_token_rows` is its map from the
        source model's token ids to this model's rows (what official inputs are translated through).

        Raises:
            CheckpointLoadError: a file is missing, unreadable, or does not match the other (one line).
        """
        meta = read_config(directory)
        with torch.device("meta"):
            encoder = cls(meta["config"], meta["vocab_size"], meta["padding_idx"], meta["fixed_block_token_id"])
        state = load_weights(directory, encoder.state_dict(), map_location)
        encoder.load_state_dict(state, assign=True)
        encoder.source_token_rows = read_source_token_rows(directory)
        return encoder.eval()


def _cut(x: Optional[torch.Tensor], n: int) -> Optional[torch.Tensor]:
    """float [batch, len, dim] -> its first ``n`` tokens (None stays None)."""
    return x if x is None or x.shape[1] == n else x[:, :n]


_logged = set()


def _log_once(message: str) -> None:
    """Log ``message`` once per process (a per-batch condition)."""
    if message not in _logged:
        _logged.add(message)
        logger.warning(message)


def _check_global_types(global_types: torch.Tensor, rows: int) -> None:
    """A clear error for a global type (int64 [batch, global_len]) outside the ``rows`` rows of the type
    embedding table, instead of the embedding's bare IndexError (eager mode only: a host read)."""
    if static_graph(global_types) or global_types.numel() == 0:
        return
    bad = (global_types < 0) | (global_types >= rows)
    if bool(bad.any()):
        value = int(global_types[bad][0])
        names = ", ".join(f"{t.name}={int(t)}" for t in GlobalTokenType)
        raise InputFormatError(
            f"global_types holds {value}, outside the model's {rows} global token types 0..{rows - 1} ({names}); "
            "a type of your own is embedded as one of these (etc-prepare structured --global-type NAME=BASE)")
