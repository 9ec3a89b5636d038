"""`skulk/demo-tools`: the demo model with a tool-calling chat template.

The same weights and tokenizer as `skulk/demo-tiny` (its files are copied), with a ChatML
template that lists the request's tools, renders an assistant's tool calls as
`<tool_call>{"name", "arguments"}</tool_call>` and tool results as `<tool_response>`: the
Hermes / Qwen2.5 format, which mlx-lm reads with its `json_tools` parser. Random weights never
call a tool by themselves; the template and the parser are what this model is for.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

MODEL_ID = "skulk/demo-tools"
DIR_NAME = "skulk--demo-tools"
TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n\nYou may call one or more functions.\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n\nFor each call, return "
    "<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{{ message.content or '' }}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "<tool_call>\n{\"name\": \"{{ tool_call.name }}\", \"arguments\": {{ tool_call.arguments | tojson }}}"
    "\n</tool_call>{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}"
    "\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")


def build_tools(models_dir: Path, base: Path, force: bool = False) -> Path:
    """`<models_dir>/skulk--demo-tools` from the built demo-tiny at `base`, atomically."""
    target = models_dir / DIR_NAME
    if target.is_dir() and (target / "config.json").is_file() and not force:
        return target
    work = Path(tempfile.mkdtemp(prefix=".demo-tools-", dir=models_dir))
    try:
        for f in base.iterdir():
            if f.is_file():
                shutil.copy2(f, work / f.name)
        config_path = work / "tokenizer_config.json"
        config = json.loads(config_path.read_text())
        config["chat_template"] = TOOLS_TEMPLATE
        config["tool_parser_type"] = "json_tools"  # what mlx-lm would infer from the template
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True))
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target
