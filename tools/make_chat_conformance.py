#!/usr/bin/env python3
"""Records what Hugging Face transformers renders for real chat templates, so
the C renderer (text/jinja/chat_template*.c) can be checked byte for byte
without Python.

Owner: coordinator chat templates.  Caller: a developer, by hand, when the
templates or the cases change; tests/unit/text/test_chat_template.c reads the
files it writes.

    /work/venv-ref/bin/python tools/make_chat_conformance.py
    # (transformers 5.23.0 + jinja2 3.1.6 produced the committed files)

Inputs:  tests/data/chat_templates/<family>.jinja, the verbatim templates
         (README.md there says where each comes from).
Outputs: tests/data/chat_templates/<family>.json, one per family: the
         family's special tokens and >= 50 conversations, each with what
         transformers renders or the error it raises (a raise_exception()
         message exactly, otherwise the exception's type);
         tests/data/chat_templates/features.json: small templates written
         here that exercise one Jinja feature each (scoping, filters, tests,
         repr, tojson, whitespace control), rendered the same way.

Rendering goes through transformers' own render_jinja_template, i.e. the
sandboxed Jinja environment apply_chat_template builds (trim_blocks,
lstrip_blocks, loopcontrols, raise_exception, strftime_now, tojson with
ensure_ascii=False), with tools=None, documents=None and the tokenizer's
bos_token / eos_token as apply_chat_template passes them.  strftime_now is
pinned to FIXED_NOW so the Llama 3.2 family is reproducible.
"""
import datetime as _dt
import json
import os
import platform
import sys

import jinja2
import transformers
import transformers.utils.chat_template_utils as ctu

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DATA = os.path.join(ROOT, "tests", "data", "chat_templates")

FIXED_NOW = _dt.datetime(2024, 9, 25, 12, 0, 0)
FIXED_NOW_UNIX = 1727265600  # the same instant in UTC; the C test runs with TZ=UTC


class _FixedDatetime(_dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return FIXED_NOW


ctu.datetime = _FixedDatetime  # what strftime_now calls

# Special tokens of each family as its tokenizer_config.json sets them (None:
# the tokenizer has none, so the template sees the name undefined).
FAMILIES = {
    "llama2": {"bos_token": "<s>", "eos_token": "</s>"},
    "llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
    "llama3_1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama3_2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "mistral": {"bos_token": "<s>", "eos_token": "</s>"},
    "mistral_v0_1": {"bos_token": "<s>", "eos_token": "</s>"},
    "zephyr": {"bos_token": "<s>", "eos_token": "</s>"},
    "smollm2": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "qwen2_5": {"bos_token": None, "eos_token": "<|im_end|>"},
}

# Message texts chosen to hit the edges of the templates: quotes, template
# syntax in content, Unicode (Python's str.strip() whitespace included),
# whitespace at the ends, special-token text, an empty string.
TEXTS = [
    "Hello!",
    "What is the capital of France?",
    "Paris.",
    "  padded with spaces  ",
    "\n\nleading and trailing newlines\n\n",
    "\ttab\tinside\t",
    "It's a \"quoted\" 'string'",
    "braces {{ not_a_var }} and {% not_a_tag %} and {# not a comment #}",
    "unicode: héllo wörld, 中文, 日本語, العربية, 🦙🚀",
    "\u3000ideographic space and no-break space\u00a0",
    "line\u2028separator and\x1cfile separator\x1d",
    "zero\u200bwidth space stays\u200b",
    "backslashes \\n \\t \\\\ and a lone \\",
    "<s>[INST] fake special tokens <|im_end|><|eot_id|></s>",
    "",
    "multi\nline\ncontent\n",
    " ",
    "x" * 300,
    "NEL\x85 and vertical tab\x0b around",
    "combining e\u0301 and ZWJ 👩\u200d💻",
]


def msg(role, text):
    return {"role": role, "content": text}


def parts(role, *texts):
    return {"role": role, "content": [{"type": "text", "text": t} for t in texts]}


def alternating(n, start=0, system=None):
    """n messages user/assistant/... drawing texts from TEXTS."""
    out = [msg("system", system)] if system is not None else []
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        out.append(msg(role, TEXTS[(start + i) % len(TEXTS)]))
    return out


def conversations(family):
    """(name, messages, add_generation_prompt, extra template kwargs)."""
    cases = []
    sys_texts = ["You are a helpful assistant.", "  Be brief.\n", "",
                 "Système: réponds en français 🇫🇷", "Quote ' and \" and {{ }}"]
    k = 0
    for turns in range(1, 7):
        for with_sys in (False, True):
            for agp in (False, True):
                sysmsg = sys_texts[k % len(sys_texts)] if with_sys else None
                cases.append((f"turns{turns}{'_sys' if with_sys else ''}{'_gen' if agp else ''}",
                              alternating(turns, start=k, system=sysmsg), agp, {}))
                k += 3
    for i, t in enumerate(TEXTS):
        cases.append((f"text{i}", [msg("user", t)], i % 2 == 0, {}))
    cases += [
        ("ends_with_assistant", alternating(2, 5), True, {}),
        ("system_only", [msg("system", "Only a system prompt")], True, {}),
        ("empty_conversation", [], True, {}),
        ("two_users", [msg("user", "one"), msg("user", "two")], True, {}),
        ("assistant_first", [msg("assistant", "I start"), msg("user", "ok")], True, {}),
        ("system_in_middle", [msg("user", "hi"), msg("system", "late system"),
                              msg("assistant", "hello")], False, {}),
        ("two_systems", [msg("system", "first"), msg("system", "second"), msg("user", "hi")],
         True, {}),
        ("tool_role", [msg("user", "weather?"), msg("tool", "sunny, 21 C")], True, {}),
        ("unknown_role", [msg("user", "hi"), msg("critic", "meh")], False, {}),
        ("content_none", [msg("user", "hi"), {"role": "assistant", "content": None}], False,
         {}),
        ("parts_user", [parts("user", "Hello from parts")], True, {}),
        ("parts_multi", [parts("system", "sys part"), parts("user", "It's one", "and two")],
         True, {}),
        ("parts_mixed", [msg("user", "plain"), msg("assistant", "ok"),
                         parts("user", "tab\there", "\u00a0nbsp", "é")], True, {}),
        ("parts_empty", [parts("user")], True, {}),
    ]
    if family.startswith("llama3_"):
        cases += [
            ("date_string", alternating(2, 3, system="sys"), True, {"date_string": "01 Jan 2025"}),
            ("date_string_nosys", alternating(1, 4), True, {"date_string": "31 Dec 1999"}),
        ]
    return cases


def render(template, messages, agp, tokens, extra):
    kwargs = {k: v for k, v in tokens.items() if v is not None}
    kwargs.update(extra)
    try:
        out, _ = ctu.render_jinja_template(conversations=[messages], chat_template=template,
                                           add_generation_prompt=agp, **kwargs)
        return {"expected": out[0]}
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:  # raise_exception()
            return {"raises": str(e)}
        return {"error": type(e).__name__, "python_message": str(e)}
    except Exception as e:  # TypeError and the like
        return {"error": type(e).__name__, "python_message": str(e)}


def versions():
    return {"transformers": transformers.__version__, "jinja2": jinja2.__version__,
            "python": platform.python_version()}


def write(path, doc):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


def make_family(family, tokens):
    with open(os.path.join(DATA, family + ".jinja"), encoding="utf-8", newline="") as f:
        template = f.read()
    cases = []
    for name, messages, agp, extra in conversations(family):
        case = {"name": name, "messages": messages, "add_generation_prompt": agp}
        case.update(extra)
        case.update(render(template, messages, agp, tokens, extra))
        cases.append(case)
    doc = {"family": family, "template": family + ".jinja", "generated_by": versions(),
           "bos_token": tokens["bos_token"], "eos_token": tokens["eos_token"],
           "now_unix": FIXED_NOW_UNIX, "cases": cases}
    write(os.path.join(DATA, family + ".json"), doc)
    n_ok = sum("expected" in c for c in cases)
    n_raise = sum("raises" in c for c in cases)
    print(f"{family}: {len(cases)} conversations ({n_ok} rendered, {n_raise} raise_exception, "
          f"{len(cases) - n_ok - n_raise} other errors)")


# Small templates, one Jinja feature each, rendered with a fixed
# conversation (messages M) by transformers like the real ones.
M = [msg("system", " Sys "), msg("user", "Hi 'there'"), msg("assistant", "Hello\n"),
     msg("user", "é中🦙")]

FEATURES = [
    # whitespace control, trim_blocks, lstrip_blocks
    "{% if true %}\n  x\n{% endif %}\n  {% if true %}y{% endif %}  \nz",
    "  {{ 'a' }}\n  {# c #}\n{%+ if true %}k{% endif %}\n    {%- if true -%}  m  {%- endif %}  \n",
    "a\n\n",
    "a\r\nb\rc\r\n",
    "{%- for m in messages -%}\n  [{{ m.role }}]\n{%- endfor %}\n",
    "{% for m in messages %}\n    {{ m.role }}\n{% endfor %}",
    "\t{% if true %}tabbed{% endif %}\n\u3000{% if true %}wide{% endif %}",
    "{# comment at start #}\n{{ 1 }}{#- trimmed -#}  \n {{ 2 }}",
    "a  {%- if true -%}  b  {%- endif -%}  c|a\u3000{%- if true -%}\u3000b{% endif %}",
    "line\n   {# comment #}   \nnext|line\n   {#- comment -#}   \nnext|x {#+ keep +#}\n y",
    "  {%+ if true +%}\n  k\n  {%- endif %}",
    "{% if true -%}\n\n   A{%- endif %}\n   {% if true %}\n B\n{% endif %}",
    "a {{- 'b' -}} c\n  {{ 'd' }}\n   {% if true %}x{% endif %}   ",
    "{% for i in [1,2] -%}\n  {{ i }}\n{%- endfor %}|{% for i in [1,2] %}\n  {{ i }}\n{% endfor %}",
    "{%- set x = 1 -%}\n\n{{ x }}\n\n\n{{ 'leading newlines' }}",
    "{% if true %}\r\nCRLF after block\r\n{% endif %}\r\n{{ 'a' }}\n{# c #}\n{{ 'b' }}  {# c #}  \n",
    "{%- for message in messages %}\n    {%- if message['role'] == 'user' %}\n        "
    "{{- '[U]' + message['content'] }}\n    {%- else %}\n        {{- '[O]' }}\n    {%- endif %}"
    "\n{%- endfor %}",
    # scoping
    "{% for i in [1,2] %}{% if i == 1 %}{% set x = 'a' %}{% endif %}[{{ x }}]{% endfor %}[{{ x }}]",
    "{% set x = 1 %}{% for i in [1,2] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
    "{% if true %}{% set y = 'set in if' %}{% endif %}{{ y }}",
    "{% set messages = messages[1:] %}{{ messages | length }}{{ messages[0].role }}",
    "{% set ns = namespace(n=0, s='') %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
    "{% set ns.s = ns.s ~ m.role[0] %}{% endfor %}{{ ns.n }} {{ ns.s }} {{ ns }}",
    "{% set a, b = ['x', 'y'] %}{{ b }}{{ a }}",
    # loops
    "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/"
    "{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }} {% endfor %}",
    "{% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }}"
    "{% else %}none{% endfor %}",
    "{% for x in [] %}x{% else %}empty{% endfor %}",
    "{% for m in messages %}{% if loop.index0 == 2 %}{% break %}{% endif %}{{ m.role }} "
    "{% endfor %}",
    "{% for m in messages %}{% if m.role == 'user' %}{% continue %}{% endif %}{{ m.role }} "
    "{% endfor %}",
    "{% for m in messages %}{{ loop.previtem.role if loop.previtem is defined else '-' }}>"
    "{{ loop.nextitem.role if loop.nextitem is defined else '-' }} {% endfor %}",
    "{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}={{ v }};{% endfor %}",
    "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}{% for c in 'hé🦙' %}[{{ c }}]{% endfor %}",
    "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ b }}{% endfor %}"
    "{{ loop.index }}{% endfor %}",
    "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(1, 10, 3) | list }}"
    "{{ range(5, 0, -2) | list }}",
    # expressions
    "{{ 1 + 2 * 3 - 4 // 3 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ -7 // 2 }} {{ 2 * -3 }}",
    "{{ 'a' + 'b' ~ 1 ~ none ~ true }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ [0] * 3 }}",
    "{{ '' and 'x' }}|{{ 'a' and 'b' }}|{{ '' or 'y' }}|{{ 'a' or 'b' }}|{{ not '' }}|{{ 0 or none }}",
    "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'a' < 'b' }} {{ 1 == true }} {{ 0 == false }} "
    "{{ '' != false }} {{ none == none }} {{ x == y }} {{ x == 1 }}",
    "{{ 'a' in 'cat' }} {{ 'z' not in 'cat' }} {{ 2 in [1, 2] }} {{ 'a' in {'a': 1} }} "
    "{{ 'x' in undefined_thing }}",
    "{{ 'yes' if messages else 'no' }}|{{ 'x' if false }}|{{ 'a' if false else 'b' if true "
    "else 'c' }}",
    "{{ messages[0]['role'] }} {{ messages[-1].content }} {{ messages[1:3] | length }} "
    "{{ messages[::2] | map(attribute='role') | join(',') }} {{ messages[10] }}|",
    "{{ 'héllo'[1] }} {{ 'héllo'[-1] }} {{ 'héllo'[1:3] }} {{ 'héllo'[::-1] }} "
    "{{ [1, 2, 3, 4][::-2] }} {{ [1, 2, 3][5:] }}",
    "{{ 'a' 'b' \"c\" }} {{ 'it\\'s' }} {{ \"\\t\\x41\\u00e9\\U0001F999\\101\\q\" }}",
    "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }} {{ {'a': [1, 'b'], 'c': none} }}",
    "{{ none.x }}|{{ none['x'] }}|{{ {}.x }}|{{ messages[0].nope }}|{{ 'abc'.nope }}|",
    "{{ true }} {{ none }} {{ True }} {{ False }} {{ None }} {{ 1_000 }}",
    "{{ {'a': {'b': 1}} }} {{ {'a': {'b': 1}}['a']['b'] }} {{ (1, 2, 3)[-2:] }} "
    "{{ 'abc'[5:1:-1] }}|{{ 'abcdef'[-100:100:2] }}|{{ [1,2,3,4,5][4:0:-2] }}",
    "{{ -1 }}{{ - 1 }}{{ -(-1) }}{{ +3 }}{{ not not 1 }} {{ 'a' ~ 'b' + 'c' }}{{ 1 ~ 2 + 3 }} "
    "{{ 2 + 3 * 4 % 5 }} {{ 'x' * 0 }}|{{ 'x' * -1 }}|{{ (1,) == [1] }}",
    "{{ messages[0] }} {{ messages[0].items() | list }} {{ ', '.join(['a', 'b']) }}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %} {% set ns = namespace() %}"
    "{% set ns.items = [1] %}{{ ns.items }} {{ namespace(a=1).a }}",
    "{{ 'x' is string and 'y' }} {{ true and false or true }}{{ not true or true }}"
    "{{ not (true or true) }} {{ 'b' not in 'abc' }}{{ not 'b' in 'abc' }}",
    "{% for m in messages %}{% set content = m.content %}{% if loop.first %}"
    "{% set content = 'FIRST' %}{% endif %}{{ content }},{% endfor %}",
    # repr of strings inside containers (what a list prints as)
    "{{ ['plain', \"it's\", 'say \"hi\"', 'both \\' \"', 'back\\\\slash', 'tab\\tnl\\n'] }}",
    "{{ ['\\x00\\x1f\\x7f', '\\xa0\\xad', '\\u200b\\u200d\\u2028', '\\ue000', 'é中🦙', "
    "'\\U000e0001'] }}",
    # tests
    "{{ x is defined }} {{ messages is defined }} {{ none is none }} {{ 'a' is string }} "
    "{{ {} is mapping }} {{ [] is mapping }} {{ 'a' is iterable }} {{ 1 is iterable }} "
    "{{ x is iterable }} {{ [] is sequence }} {{ 1 is number }} {{ true is number }} "
    "{{ true is boolean }} {{ 1 is integer }} {{ true is integer }} {{ true is true }} "
    "{{ 1 is true }} {{ false is false }}",
    "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} "
    "{{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 2 is gt 1 }} {{ 'b' is lt 'a' }} {{ 2 is in [1, 2] }} "
    "{{ none is sameas none }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ x is not defined }} "
    "{{ strftime_now is callable }} {{ raise_exception is defined }}",
    # filters
    "[{{ '  x  ' | trim }}] [{{ '\u3000x\u00a0\u2028' | trim }}] [{{ 'xxaxx' | trim('x') }}] "
    "[{{ none | trim }}] [{{ x | trim }}]",
    "{{ 'abc' | length }} {{ 'é🦙' | length }} {{ messages | length }} {{ {'a': 1} | count }} "
    "{{ x | length }}",
    "{{ 'Hello World' | upper }} {{ 'Hello World' | lower }} {{ 'hELLO wORLD' | capitalize }} "
    "{{ 'hello world-foo (bar) [baz] <qux>' | title }}",
    "{{ x | default('d') }} {{ '' | default('e') }} {{ '' | default('e', true) }} "
    "{{ none | default('f') }} {{ x | d('g') }} {{ 0 | default('h', boolean=true) }}",
    "{{ [1, 2, 3] | join }} {{ [1, 'a', none] | join(', ') }} {{ 'abc' | join('-') }} "
    "{{ messages | join('|', attribute='role') }}",
    "{{ ['a'] | first }} {{ 'abc' | last }} {{ [] | first }}|{{ [1, 2] | reverse | list }} "
    "{{ 'abc' | reverse }} {{ 'ab' | list }} {{ 42 | string }} {{ [1] | string }}",
    "{{ '12' | int }} {{ ' -7 ' | int }} {{ 'x' | int }} {{ 'x' | int(5) }} {{ true | int }} "
    "{{ '3.9' | int }} {{ none | int }}",
    "{{ ['a', 'b', 'code'] | reject('equalto', 'code') | join(', ') }} "
    "{{ [0, 1, 2, 3] | select('odd') | list }} {{ [0, 1, '', 'x'] | select | list }} "
    "{{ [1, 2, 3] | reject('gt', 1) | list }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} "
    "{{ messages | rejectattr('role', 'in', ['user', 'system']) | list | length }} "
    "{{ messages | map(attribute='role') | map('upper') | join }}",
    "{{ {'b': 1, 'a': 2} | items | list }} {{ x | items | list }} {{ {'a': 1}.items() | list }} "
    "{{ {'a': 1}.keys() | list }} {{ {'a': 1}.values() | list }} {{ {'a': 1}.get('a') }} "
    "{{ {'a': 1}.get('b') }} {{ {'a': 1}.get('b', 2) }}",
    "{{ 'a-b-a' | replace('a', 'x') }} {{ 'aaa' | replace('a', 'b', 2) }} "
    "{{ 'ab' | replace('', '.') }} {{ -3 | abs }} {{ 'x' | safe }}",
    # tojson (transformers' override: ensure_ascii=False)
    "{{ {'a': 1, 'b': [true, none, 'é\"\\n\\u0001\\u007f'], 'c': {}} | tojson }}",
    "{{ {'name': 'f', 'parameters': {'type': 'object', 'properties': {'x': {'type': 'string'}},"
    " 'required': ['x']}, 'e': []} | tojson(indent=4) }}",
    "{{ [1, [2, [3]]] | tojson(indent=2) }} {{ 'str' | tojson }} {{ none | tojson }} "
    "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ {1: 'x'} | tojson }}",
    "{{ messages | tojson }}",
    # string methods
    "[{{ '  x  '.strip() }}] [{{ 'xyx'.strip('x') }}] [{{ '  x  '.lstrip() }}] "
    "[{{ '  x  '.rstrip() }}] [{{ '\u3000é\u00a0'.strip() }}]",
    "{{ 'a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} "
    "{{ '  a b c '.split(none, 1) }} {{ ''.split() }} {{ ''.split(',') }}",
    "{{ 'abc'.startswith('a') }} {{ 'abc'.endswith('bc') }} {{ 'abc'.startswith(('x', 'ab')) }} "
    "{{ 'abc'.endswith('x') }}",
    "{{ 'hello WORLD'.upper() }} {{ 'Hello'.lower() }} {{ 'hello wORLD 1st'.title() }} "
    "{{ 'hELLO'.capitalize() }} {{ 'a.b.c'.replace('.', '/') }} {{ 'aaa'.replace('a', 'b', 1) }}",
    # functions
    "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M') }}",
    "{{ namespace(a=1, b='x') }} {{ dict(a=1) }} {{ dict({'k': 'v'}, z=2) }}",
    # errors
    "{{ raise_exception('custom failure: ' ~ messages | length) }}",
    "{% if messages[0].role != 'user' %}{{ raise_exception('First message must be from the "
    "user, got ' + messages[0].role) }}{% endif %}",
    "{{ undefined_thing.attr }}",
    "{{ 'a' + 1 }}",
    "{{ 1 + none }}",
    "{{ messages[0].content + [] }}",
    "{{ x + 'a' }}",
    "{{ 1 // 0 }}",
    "{% for x in 5 %}{% endfor %}",
    "{% set x = 1 %}{% set x.y = 2 %}",
    "{{ 'a' < 1 }}",
    "{{ range(200000) | length }}",
    "{{ {'a': undefined_thing} | tojson }}",
    "{{ 'x' in none }}",
    "{% for a, b in [[1, 2, 3]] %}{{ a }}{% endfor %}",
    "{% for c in none %}{% endfor %}",
    "{{ ', '.join([1]) }}",
    "{% generation %}gen {{ messages | length }}{% endgeneration %}",
]


# Content given as parts, for templates that loop over them (as Llama 4's
# and the VLM templates do).
M_PARTS = [parts("system", "sys"), parts("user", "Hello ", "world"), msg("assistant", "Hi"),
           parts("user", "it's é")]
FEATURES += [
    ("{% for m in messages %}{{ m.role }}:{% if m.content is string %}{{ m.content }}{% else %}"
     "{% for p in m.content %}{% if p.type == 'text' %}[{{ p.text }}]{% endif %}{% endfor %}"
     "{% endif %}\n{% endfor %}", M_PARTS),
    ("{{ messages[1].content }} {{ messages[1]['content'][0]['text'] | trim }} "
     "{{ messages[3].content | map(attribute='text') | join }} {{ messages[1].content | tojson }}",
     M_PARTS),
]


def make_features():
    cases = []
    for i, tmpl in enumerate(FEATURES):
        tmpl, messages = tmpl if isinstance(tmpl, tuple) else (tmpl, M)
        case = {"name": f"feature{i}", "template": tmpl, "messages": messages,
                "add_generation_prompt": True}
        case.update(render(tmpl, messages, True, {"bos_token": "<s>", "eos_token": "</s>"}, {}))
        cases.append(case)
    write(os.path.join(DATA, "features.json"),
          {"generated_by": versions(), "bos_token": "<s>", "eos_token": "</s>",
           "now_unix": FIXED_NOW_UNIX, "cases": cases})
    print(f"features: {len(cases)} templates "
          f"({sum('expected' in c for c in cases)} rendered)")


def main():
    if not os.path.isdir(DATA):
        sys.exit(f"{DATA}: missing")
    for family, tokens in FAMILIES.items():
        make_family(family, tokens)
    make_features()


if __name__ == "__main__":
    main()
