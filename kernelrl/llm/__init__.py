"""The model side: backends, prompts, response parsing, the tiny local test model (see README.md here).

    from kernelrl.llm import make_backend, build_augment_messages, build_contrastive_messages, parse_response
    backend = make_backend("https://api.deepseek.com/v1#deepseek-chat")    # or vllm:ID, a local path, tiny
    gens = backend.generate([build_augment_messages(task)], n=4, max_tokens=4096, temperature=0.8)
    parsed = parse_response(gens[0][0].text)                               # .code, .error, .analysis, .design
"""

from kernelrl.llm.backends import Backend, Generation, Usage, make_backend
from kernelrl.llm.parsing import Parsed, parse_response
from kernelrl.llm.prompts import (
    ContrastivePrompt,
    augmentation_prompt,
    build_augment_messages,
    build_contrastive_messages,
    contrastive_prompt,
    render_chat,
)

__all__ = ["Backend", "ContrastivePrompt", "Generation", "Parsed", "Usage", "augmentation_prompt",
           "build_augment_messages", "build_contrastive_messages", "contrastive_prompt", "make_backend",
           "parse_response", "render_chat"]
