"""The repeatable KEY=VALUE flags (--spark-conf, --catalog-property, recover's --config) share one parser."""

from __future__ import annotations

import pytest

from storage_core.cli.common import key_values
from storage_core.errors import ConfigError


def test_items_become_a_dictionary_the_last_of_a_key_winning() -> None:
    items = ["spark.a=1", " spark.b =x=y", "spark.a=2", "empty="]
    assert key_values(items, "--spark-conf") == {"spark.a": "2", "spark.b": "x=y", "empty": ""}


@pytest.mark.parametrize("item", ["no-equals-sign", "=value"])
def test_an_item_without_a_key_is_refused_naming_the_flag_and_the_item(item: str) -> None:
    with pytest.raises(ConfigError) as refused:
        key_values(["ok=1", item], "--catalog-property")
    assert str(refused.value) == f"--catalog-property {item!r}: expected KEY=VALUE"
