"""Imported by the rollout workers' fork server right after the worker's stack: warms the stack's lazy imports (a
worker's reseeding) and counts the modules imported so far, so that its first log line can count the ones the
environments open with beyond them."""

import sys

from platoon.live.workers.worker import reseed

reseed()  # its first call imports what it needs, here rather than in each worker

MODULES = len(sys.modules)
