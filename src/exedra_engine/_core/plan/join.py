"""Flags joined to a merge after it: what the planner decides from the merged argv (the memory
plan's context and prompt cache) joins it without a second merge, since no layer set them."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import chain

import msgspec

from exedra_engine._core.executors.flags import FlagTable, Item
from exedra_engine._core.plan.layers import Merged
from exedra_engine._core.struct import freeze


def join_unset(
    m: Merged,
    table: FlagTable,
    tokens: Sequence[str],
    *,
    layer: str,
    at: int,
    lower: Collection[str],
) -> Merged:
    """`m` with `tokens` inserted at index `at` of layer `layer`'s args, as merging the layers
    again with them there would give, when no layer sets their flags nor the variables of
    those flags: there is nothing to fold, so the layers are not merged a second time (the
    memory plan's flags, `exedra_engine._core.memory.decide`). `lower` names the layers
    ranked below `layer`, whose items come first."""
    if not tokens:
        return m
    added = [msgspec.structs.replace(it, at=it.at + at) for it in table.split_items(tokens, layer)]
    shift = len(tokens)

    def joined(items: tuple[Item, ...], names: tuple[str, ...]) -> tuple[list[Item], list[str]]:
        out: list[Item] = []
        out_names: list[str] = []
        placed = False
        for item, name in zip(items, names, strict=True):
            moved = name == layer and item.at >= at  # after the insertion, in its layer
            if not placed and (moved or (name != layer and name not in lower)):
                out += added
                out_names += [layer] * len(added)
                placed = True
            out.append(msgspec.structs.replace(item, at=item.at + shift) if moved else item)
            out_names.append(name)
        if not placed:
            out += added
            out_names += [layer] * len(added)
        return out, out_names

    items, item_layers = joined(m.items, m.item_layers)
    read, read_layers = joined(m.read, m.read_layers)
    settings = {it.key: it.values for it in items if it.key is not None}
    for k in table.repeatable_keys.intersection(settings):
        del settings[k]
    return msgspec.structs.replace(
        m,
        args=tuple(chain.from_iterable([it.tokens for it in items])),
        settings=freeze(settings),
        items=tuple(items),
        item_layers=tuple(item_layers),
        read=tuple(read),
        read_layers=tuple(read_layers),
    )
