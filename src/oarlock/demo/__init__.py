"""The bundled demo: a refund desk agent, offline."""

from pathlib import Path

AGENT_FILE = Path(__file__).with_name("refund-desk.yaml")

__all__ = ["AGENT_FILE"]
