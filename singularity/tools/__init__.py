"""The being's tool layer: built-in self tools and MCP servers behind one catalogue."""

from singularity.tools.catalogue import ToolCatalogue, build_catalogue
from singularity.tools.outcome import ToolOutcome, ToolSpec

__all__ = ["ToolCatalogue", "ToolOutcome", "ToolSpec", "build_catalogue"]
