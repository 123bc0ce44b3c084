# SPDX-License-Identifier: BSD-3-Clause
"""Shared fixtures. The tests run against the installed package and the library FLASHATTN_LIBRARY names."""

import json
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
TESTDATA = os.environ.get("FLASHATTN_TESTDATA", os.path.join(REPO, "bindings", "testdata"))
SPEC = os.environ.get("FLASHATTN_SPEC", os.path.join(REPO, "bindings", "spec", "flashattn_api.json"))


@pytest.fixture(scope="session")
def spec():
    with open(SPEC, encoding="utf-8") as f:
        return json.load(f)


def vector_files():
    return sorted(f for f in os.listdir(TESTDATA) if f.endswith(".json"))
