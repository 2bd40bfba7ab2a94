"""The policy model and the services that sample it: the model interface and the built-in tiny transformer
(``model``), a Hugging Face checkpoint behind the same interface (``hf``), which one ``train.model_name`` names
(``model_kinds``), the in-process batching model service (``service``), and the ``vllm`` engine with its servers,
weight store and wire format (``engine``, ``launch``, ``vllm``, ``weights``, ``completions``, ``direct``).

Importing this package imports nothing of its modules (``model`` imports torch; ``hf`` imports ``transformers``
only when a checkpoint is loaded).
"""
