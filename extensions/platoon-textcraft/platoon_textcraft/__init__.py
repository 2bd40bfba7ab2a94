"""platoon-textcraft: the TextCraft environments for platoon, in text (instruction, tools, a grade).

Importing the package registers ``textcraft-synth`` (a world generated from a seed) and ``textcraft`` (real
crafting recipes from a directory the user names); platoon imports it through the ``platoon.extensions`` entry
point, after checking this distribution's requirement on platoon.
"""

from platoon_textcraft.minecraft import TextCraft
from platoon_textcraft.synth import TextCraftSynth

__version__ = "0.3.0"
__all__ = ["TextCraft", "TextCraftSynth", "__version__"]
