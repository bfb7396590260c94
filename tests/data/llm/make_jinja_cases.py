"""Writes jinja_cases.json: chat templates of common open models (as their tokenizer_config.json
ships them) and small edge-case templates, each rendered by the real Jinja2 with the settings
transformers' apply_chat_template uses (trim_blocks, lstrip_blocks). test_jinja.c renders the
same and compares byte for byte. Run: python tests/data/llm/make_jinja_cases.py"""
import json
import os

import jinja2


def raise_exception(msg):
    raise jinja2.exceptions.TemplateError(msg)


TEMPLATES = {
    "smollm2": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
    "llama3": "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}",
    "mistral": "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
    "gemma": "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}",
    "qwen25": """{%- if messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}
{%- else %}
    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
""",
    "phi3": "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}",
    # a multi-line template in the style of Llama 3.1 (namespace, strftime-free date, system split)
    "llama31_like": """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{%- set ns = namespace(n_user=0) %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message.role == 'user' %}{% set ns.n_user = ns.n_user + 1 %}{% endif %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
{{- '' if ns.n_user > 0 else 'no user' }}""",
    # edge cases of the renderer
    "blocks_ws": "{% if true %}\n  x\n{% endif %}\n  {% if true %}y{% endif %}\n{# c #}\nz {{- ' w' -}}  \n q",
    "loop_vars": "{% for m in messages if m.role != 'system' %}{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% else %}none{% endfor %}|{% for k, v in {'a': 1, 'b': [1, 2]}.items() %}{{ k }}={{ v | tojson }};{% endfor %}",
    "filters": "{{ messages | map(attribute='role') | join(', ') }}|{{ messages | selectattr('role', 'equalto', 'user') | list | length }}|{{ '  Hi ' | trim | upper }}|{{ messages[-1].content[:5] }}|{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ 2 * 3 + 1 }} {{ 7 / 2 }}|{{ 'a,b,,c'.split(',') | tojson }}|{{ x | default('dflt') }}|{{ [3, 1, 2] | sort | reverse | list }}|{{ 'ab' ~ 3 ~ none }}|{{ messages[0] is mapping }} {{ 3 is odd }} {{ 'x' in 'xyz' }} {{ 'q' not in ['a'] }}|{{ {'k': [1, 'two', none, true]} | tojson(indent=2) }}",
    "strings": "{{ messages[0].content.startswith('You') }} {{ ' a b '.strip() }}{{ 'x'.endswith('y') }} {{ 'hello world'.title() }} {{ 'a-b'.replace('-', '+') }} {{ \"it's\" }} {{ 'tab\\there' }}",
}

MESSAGES = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system_user": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "  Hi there  "}],
    "turns": [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
              {"role": "user", "content": "And 3+3? Ünïcödé ✓"}],
    "system_turns": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "A"},
                     {"role": "assistant", "content": "B"}, {"role": "user", "content": "C"}],
}

env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
env.globals["raise_exception"] = raise_exception
cases = []
for tname, src in TEMPLATES.items():
    tpl = env.from_string(src)
    for mname, msgs in MESSAGES.items():
        for gen in (True, False):
            case = {"template": tname, "messages": mname, "add_generation_prompt": gen}
            try:
                case["output"] = tpl.render(messages=msgs, add_generation_prompt=gen, bos_token="<s>",
                                            eos_token="</s>")
            except jinja2.exceptions.TemplateError as e:
                case["error"] = str(e)
            cases.append(case)
out = {"jinja2_version": jinja2.__version__, "templates": TEMPLATES, "messages": MESSAGES, "cases": cases}
with open(os.path.join(os.path.dirname(__file__), "jinja_cases.json"), "w") as f:
    json.dump(out, f, indent=1, ensure_ascii=False)
print(len(cases), "cases")
