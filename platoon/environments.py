"""platoon's public API for environment authors: the text environment protocol an environment implements.

An environment lists tasks per split and plays one episode per rollout; the agent (a model, through a renderer and
the tool-calling harness) answers each episode's instruction with tool calls, and the finished episode is graded.
The environment never sees a token, so one environment serves the built-in tiny model and a chat model alike
(docs/writing-a-text-environment.md):

```
env.speaks_text = True                 says which protocol it speaks (a class attribute)
env.task_ids(split) -> list[str]       a split's tasks, in a fixed order; KeyError naming the known splits
env.task(task_id) -> Task              the same Task every time it is asked
env.eval_split: str                    optional: the split evaluation lists by default (else ``eval``)
env.words: tuple[str, ...]             optional: the words it writes and expects back (the tiny model's vocabulary)
env.episode(task) -> TextEpisode       one rollout; many run at once

episode.reset() -> str                 the instruction, once, first
episode.tools: Sequence[Tool]          fixed for the episode; a ``terminal`` tool ends it
episode.call(ToolCall) -> ToolResult   or an awaitable of one (an environment that does I/O)
episode.outcome() -> Outcome           reward in [0, 1] and success, once the episode has ended
```

The contract:
- the agent's mistakes are answers, not exceptions: a call of an unknown tool, or with a bad or missing argument,
  returns a ``ToolResult`` with ``error=True`` whose text says what was wrong, and changes nothing; an exception
  from ``call`` fails the rollout and its group;
- an episode ends after a terminal tool, a result with ``done=True``, its ``task.max_turns``-th assistant message,
  or when its context fills the model's window; ``outcome()`` answers after any of these;
- ``reward`` is what trains; ``success`` is what pass@1, the per-task statistics and the samplers count.

An environment plugs in by name (``@environment("name")``), as ``module:Class``, or through an entry's ``package``
or an extension's entry point; a class that does not say ``speaks_text = True`` is refused
(``is_text_environment``). The names live in ``platoon.live.envs`` (``base``, ``text``) and
``platoon.config.registry``; this module is the path that stays put.
"""

from platoon.config.registry import environment
from platoon.live.envs.base import Outcome, Task
from platoon.live.envs.text import (
    TextEnvironment,
    TextEpisode,
    Tool,
    ToolCall,
    ToolResult,
    is_text_environment,
)

__all__ = [
    "Outcome",
    "Task",
    "TextEnvironment",
    "TextEpisode",
    "Tool",
    "ToolCall",
    "ToolResult",
    "environment",
    "is_text_environment",
]
