"""Embeds the protocol's scripts (the repository's lua/*.lua) into the package at build
time, as jobqueue/lua/<name>.lua: the package never carries a hand-made copy. An
editable install embeds nothing; it reads the scripts from the repository
(jobqueue/scripts.py finds them)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


def repository_lua(root: str) -> Path:
    lua = Path(os.environ.get("JOBQUEUE_LUA") or Path(root, "..", "..", "lua")).resolve()
    if not any(lua.glob("*.lua")):
        raise RuntimeError(
            f"jobqueue: no protocol scripts in {lua}; build from the repository "
            "(clients/python) or set JOBQUEUE_LUA to its lua/ folder"
        )
    return lua


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name == "wheel" and version == "editable":
            return
        if self.target_name == "wheel" and any(Path(self.root, "src/jobqueue/lua").glob("*.lua")):
            return  # built from an sdist, which carries the scripts it was made with
        lua = repository_lua(self.root)
        for script in sorted(lua.glob("*.lua")):
            target = f"jobqueue/lua/{script.name}"
            if self.target_name == "sdist":
                target = f"src/{target}"
            build_data["force_include"][str(script)] = target
