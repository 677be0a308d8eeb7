"""Coding agents' hooks: `stallwatch hook <agent>` (the command form) and `stallwatch hooks
install|uninstall <agent>`. Standard library only: the command runs on every tool call."""
