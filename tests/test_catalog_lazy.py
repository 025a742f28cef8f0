"""The model catalog converts a preset only when it is asked for, so a growing catalog costs a lookup
nothing; the alias index, read from each file's header, agrees with the presets themselves."""

from __future__ import annotations

import pytest

from moe_long_context.errors import InputError
from moe_long_context.model import catalog


@pytest.fixture
def fresh_catalog():
    catalog._load_preset.cache_clear()
    catalog._alias_index.cache_clear()
    yield
    catalog._load_preset.cache_clear()
    catalog._alias_index.cache_clear()


def test_a_lookup_converts_only_the_preset_it_names(fresh_catalog):
    assert catalog.load_model("DSV3").id == "deepseek-v3"
    assert catalog._load_preset.cache_info().currsize == 1
    with pytest.raises(InputError, match="did you mean 'deepseek-v3'"):
        catalog.load_model("deepsek-v3")
    assert catalog._load_preset.cache_info().currsize == 1  # an unknown id converts nothing either


def test_the_header_index_agrees_with_every_preset(fresh_catalog):
    index = catalog._alias_index()
    for spec in catalog.models():
        for name in (spec.id, *spec.aliases):
            assert index[name.lower()] == spec.id
    assert set(index.values()) == set(catalog.model_ids()) == {spec.id for spec in catalog.models()}


def test_header_reads_flow_and_block_lists():
    text = "# comment\nid: x\naliases:\n  - a\n  - b\nname: X\nconfig_json:\n  id: not-this\n"
    assert catalog._header(text) == {"id": "x", "aliases": ["a", "b"]}
    assert catalog._header("id: y\naliases: [c, d]\n") == {"id": "y", "aliases": ["c", "d"]}
