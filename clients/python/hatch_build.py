"""Puts the Functions twin into the package at build time: the repository's
functions/throttle.lua becomes redis_throttle/throttle.lua in the wheel and functions/throttle.lua
in the sdist, from which a wheel built out of the sdist takes it. Git holds one copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class TwinHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        packed = root / "functions" / "throttle.lua"  # in an unpacked sdist
        checkout = root.parent.parent / "functions" / "throttle.lua"  # clients/python in a checkout
        source = packed if packed.is_file() else checkout
        if not source.is_file():
            raise RuntimeError(
                f"redis-throttle: the Functions twin is missing ({checkout} or {packed}): build the package "
                "from a checkout of the repository (clients/python) or from its sdist"
            )
        where = "functions/throttle.lua" if self.target_name == "sdist" else "redis_throttle/throttle.lua"
        build_data["force_include"][str(source)] = where
