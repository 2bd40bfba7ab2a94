"""Supervised fine-tuning on demonstrations (``platoon sft``): where demonstrations come from and how they become
tokens (``demonstrations``), the step (``trainer``), and the command's body (``command``). docs/warm-start.md."""
