"""The usage line every command prints: arguments by a readable metavar (``SESSION...``, ``[PATH]...``).

typer writes a required argument as ``{paths}...``; ``ReadableCommand`` writes the argument's metavar (or its
name in capitals), ``...`` when it takes several values, in brackets when it may be left out.
"""

from __future__ import annotations

from typing import Any

import typer
import typer.core


class ReadableCommand(typer.core.TyperCommand):
    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":  # SESSION... (required), [PATH]... (optional)
                name = (param.metavar or (param.name or "").upper()).removesuffix("...")
                pieces.append((name if param.required else f"[{name}]") + ("..." if param.nargs != 1 else ""))
            else:
                pieces.extend(param.get_usage_pieces(ctx))
        return pieces


def readable_usage(app: typer.Typer) -> None:
    """Give every command of ``app`` and of its sub-apps (``hooks install``) the readable usage line."""
    for info in app.registered_commands:
        if info.cls in (None, typer.core.TyperCommand):
            info.cls = ReadableCommand
    for group in app.registered_groups:
        if group.typer_instance is not None:
            readable_usage(group.typer_instance)
