#!/usr/bin/env python3
"""Generates tests/data/tmpl_cases.json(.gz): Jinja2 snippets rendered by the real jinja2 in the
environment transformers' apply_chat_template uses (ImmutableSandboxedEnvironment, trim_blocks,
lstrip_blocks, loopcontrols, raise_exception, strftime_now, tojson = json.dumps without HTML
escaping, the `generation` tag). tests/model/test_tmpl_lang.c checks our interpreter against it.

Run: python3 tests/model/gen_tmpl_cases.py | gzip -9 -n > tests/data/tmpl_cases.json.gz   (needs jinja2 >= 3.1;
kept compressed: 548 KB plain, 21 KB gzip'd; make unpacks it to build/data/tmpl_cases.json)
"""
import json
import sys

import jinja2
import jinja2.nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Generation(Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_gen"), [], [], body).set_lineno(lineno)

    def _gen(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                    extensions=[Generation, jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda fmt: "unused"

BASE = {
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Grüße — 日本語 🚀"},
    ],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "d": {"b": 2, "a": 1, "C": 3, "items": "key named items", "n": None},
    "nested": {"x": {"y": {"z": [10, 20, 30]}}},
    "nums": [3, 1, 2, 10, -4],
    "floats": [1.5, 2.25, -0.5, 1e-07, 123456789.125],
    "words": ["banana", "Apple", "cherry", "apple", "Banana"],
    "people": [{"name": "Ann", "age": 31, "city": "Oslo"}, {"name": "bob", "age": 25, "city": "Rome"},
               {"name": "Cid", "age": 31, "city": "oslo"}, {"name": "Dee", "age": 19}],
    "s": "  Hello, World!  ",
    "u": "Grüße — 日本語 🚀",
    "empty": "",
    "zero": 0,
    "t": True,
    "f": False,
    "none": None,
    "big": 9007199254740993,
    "fl": 2.5,
    "add_generation_prompt": True,
    "bos_token": "<s>",
    "eos_token": "</s>",
}

CASES = []


def case(name, template, ctx=None, base=True):
    context = dict(BASE) if base else {}
    if ctx:
        context.update(ctx)
    CASES.append((name, template, context))


# ---------------------------------------------------------------- whitespace and syntax
case("text_only", "plain text\nsecond line\n")
case("trailing_newline_dropped_once", "a\n\n")
case("crlf_normalized", "a\r\nb\rc{{ 'x\r\ny' }}")
case("trim_blocks", "{% if true %}\nyes\n{% endif %}\nafter")
case("lstrip_blocks", "   {% if true %}\n    x\n   {% endif %}\n")
case("lstrip_not_for_vars", "   {{ 'v' }}\n")
case("lstrip_only_whitespace_before", "ab {% if true %}x{% endif %}")
case("minus_both_sides", "a   \n  {%- if true -%}  \n  b  \n  {%- endif -%}   \n  c")
case("plus_disables_lstrip", "   {%+ if true %}x{% endif %}")
case("plus_keeps_newline_after", "{% if true +%}\nx{% endif %}")
case("var_minus", "a  {{- 'b' -}}  \n c")
case("comment", "a{# comment #}b\n  {# own line #}\nc")
case("comment_minus", "a  {#- c -#}  b")
case("raw_block", "{% raw %}{{ not evaluated }}{% endraw %}")
case("raw_trim", "  {% raw %}\n{{x}}\n  {% endraw %}\nz")
case("nested_braces_in_expr", "{{ {'a': {'b': 1}}['a'] }}")
case("unicode_whitespace_strip", "a\u3000 {{- 'b' }}")
case("line_after_var_not_trimmed", "{{ 'a' }}\nb")
case("block_at_start_line_after_var", "{{ 'a' }}  {% if true %}x{% endif %}")
case("lstrip_tab", "\t{% if true %}t{% endif %}")
case("comment_trim_blocks", "{# c #}\nafter")
case("print_tag", "{% print 'a', 1 %}")

# ---------------------------------------------------------------- literals and printing
case("ints", "{{ 0 }} {{ 42 }} {{ -7 }} {{ 1_000 }} {{ 0x1F }} {{ 0o17 }} {{ 0b101 }}")
case("floats", "{{ 1.0 }} {{ 0.1 }} {{ 1.5e3 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ -0.0 }} {{ 3.14159 }} {{ 2.5e-300 }}")
case("float_ops", "{{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 10 / 2 }} {{ 2 ** 0.5 }} {{ 1e308 * 10 }} {{ fl * 2 }}")
case("strings_escapes", r"""{{ 'a\nb' }}|{{ "tab\there" }}|{{ 'q\'s' }}|{{ "d\"q" }}|{{ '\x41\u00e9\U0001F680' }}|{{ 'back\\slash' }}|{{ '\d' }}|{{ '\101' }}""")
case("adjacent_strings", "{{ 'a' 'b' \"c\" }}")
case("print_none_bool", "{{ none }} {{ None }} {{ true }} {{ True }} {{ false }} {{ False }}")
case("print_list", "{{ [1, 'a', none, true, 1.5, [2]] }}")
case("print_tuple", "{{ (1,) }} {{ (1, 2) }} {{ () }} {{ 1, 2 }}")
case("print_dict", "{{ {'a': 1, 'b': [1, 2], 3: 'x', none: true} }}")
case("print_nested_quotes", """{{ ["it's", 'say "hi"', 'both \\' and "', 'back\\\\slash'] }}""")
case("print_unicode_repr", "{{ [u, 'tab\\t', 'nl\\n', 'ctrl\\x01', 'del\\x7f', 'nbsp\\xa0', 'zwsp\\u200b'] }}")
case("print_dict_from_ctx", "{{ d }}|{{ nested }}|{{ people[0] }}")
case("print_big_int", "{{ big }} {{ big + 1 }}")
case("print_undefined", "[{{ missing }}][{{ d.missing }}][{{ d['missing'] }}]")
case("print_string_list_repr", "{{ words }}")
case("print_range", "{{ range(3) }} {{ range(1, 10, 2) }} {{ range(3)|list }}")
case("print_dict_views", "{{ d.keys() }} {{ {'a': 1}.values() }} {{ {'a': 1}.items() }}")
case("print_namespace", "{% set ns = namespace(a=1, b='x') %}{{ ns }}")
case("print_macro", "{% macro m() %}{% endmacro %}{{ m }}")
case("print_loop", "{% for i in [1, 2] %}{{ loop }}{% endfor %}")

# ---------------------------------------------------------------- operators
case("arith_int", "{{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 ** 10 }} {{ 2 ** -1 }}")
case("arith_negative", "{{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7 // -2 }} {{ -7.5 // 2 }} {{ -7.5 % 2 }} {{ 7.5 % -2 }}")
case("arith_mixed", "{{ 1 + 1.5 }} {{ true + 1 }} {{ true * 3 }} {{ 3 - false }} {{ 10 // 2.5 }} {{ 2.0 ** 3 }}")
case("unary_pow_precedence", "{{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ -(3) }} {{ +5 }} {{ - -5 }}")
case("string_concat_plus", "{{ 'a' + 'b' + 'c' }}")
case("tilde_concat", "{{ 'n=' ~ 5 ~ none ~ true ~ missing ~ [1] }}")
case("concat_precedence", "{{ 1 + 2 ~ 3 }} {{ 'x' ~ 2 * 3 }}")
case("string_repeat", "{{ 'ab' * 3 }}{{ 3 * 'c' }}{{ 'z' * 0 }}{{ [1] * 2 }}")
case("list_concat", "{{ [1, 2] + [3] }} {{ (1,) + (2,) }}")
case("compare", "{{ 1 < 2 }} {{ 2 <= 2 }} {{ 3 > 4 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 1 != '1' }}")
case("compare_chain", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }} {{ 1 == 1 == 1 }} {{ 3 > 2 >= 2 }}")
case("in_not_in", "{{ 'a' in 'cat' }} {{ 'x' not in 'cat' }} {{ 2 in [1, 2] }} {{ 'a' in d }} {{ 'z' in d }} {{ 1 in (1, 2) }} {{ '' in 'abc' }}")
case("and_or_values", "{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ none or [] }} {{ [] and 1 }} {{ 1 and 0 }} {{ not 0 }} {{ not 'x' }}")
case("not_precedence", "{{ not 1 == 2 }} {{ not true and false }} {{ not (true and false) }}")
case("cond_expr", "{{ 'yes' if t else 'no' }} {{ 'yes' if f else 'no' }} [{{ 'x' if f }}] {{ 1 if f else 2 if t else 3 }}")
case("equality_containers", "{{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} {{ none == none }} {{ missing == missing }} {{ missing == none }}")
case("truthiness", "{% for v in [0, 1, '', 'a', [], [0], {}, none, 0.0, 0.1] %}{{ 'T' if v else 'F' }}{% endfor %}")
case("string_percent", "{{ '%s and %s' % ('a', 1) }} {{ '%d%%' % 50 }} {{ '%05.1f|%-4d|%x' % (3.14159, 7, 255) }} {{ '%(a)s' % {'a': 'A'} }}")
case("string_format_method", "{{ '{} {}'.format('a', 2) }} {{ '{1}{0}'.format('x', 'y') }} {{ '{name}!'.format(name='N') }} {{ '{:>5}|{:<5}|{:^5}'.format('a', 'b', 'c') }} {{ '{:.2f} {:,} {:05d} {:x}'.format(3.14159, 1234567, 42, 255) }}")

# ---------------------------------------------------------------- attribute and item access
case("dict_access", "{{ d.a }} {{ d['b'] }} {{ nested.x.y.z[1] }} {{ nested['x']['y']['z'][-1] }} {{ people[1].name }}")
case("dict_items_attr_vs_key", "{{ d['items'] }}|{{ d.get('items') }}|{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}")
case("dict_get_default", "{{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dflt') }} {{ d.get('n', 'x') }}")
case("dict_keys_values", "{{ d.keys()|list }} {{ d.values()|list }}")
case("negative_index", "{{ nums[-1] }} {{ nums[-5] }} {{ 'hello'[-1] }} {{ u[-1] }} {{ u[2] }}")
case("slices", "{{ nums[1:] }} {{ nums[:2] }} {{ nums[::-1] }} {{ nums[1:4:2] }} {{ nums[-2:] }} {{ nums[:-2] }} {{ nums[10:] }} {{ nums[::-2] }}")
case("string_slices", "{{ 'abcdef'[1:3] }} {{ 'abcdef'[::-1] }} {{ u[:5] }} {{ u[::-1] }} {{ 'abc'[5:] }}|{{ 'abcdef'[-3:-1] }} {{ u[1::3] }}")
case("tuple_slice", "{{ (1, 2, 3)[1:] }} {{ range(10)[2:5]|list }}")
case("dot_integer", "{{ nums.0 }} {{ nested.x.y.z.2 }}")
case("missing_index", "[{{ nums[10] }}][{{ d[1] }}][{{ 'abc'[9] }}][{{ none.x }}][{{ none[0] }}][{{ 5.x }}]")
case("undefined_attr_chain_error", "{{ missing.attr }}")
case("undefined_item_error", "{{ missing[0] }}")
case("defined_attr_of_missing_key", "{{ d.missing.deeper }}")
case("private_attr", "[{{ d.__class__ }}]")
case("string_attr", "[{{ 'abc'.foo }}]{{ 'abc'['upper']() }}")

# ---------------------------------------------------------------- tests
case("tests_types", "{% for v in [1, 1.5, 'a', none, true, [1], {'a': 1}, (1,), missing] %}{{ v is number }}{{ v is integer }}{{ v is float }}{{ v is string }}{{ v is none }}{{ v is boolean }}{{ v is mapping }}{{ v is iterable }}{{ v is sequence }}{{ v is defined }}{{ v is undefined }}|{% endfor %}")
case("tests_values", "{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ true is true }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}")
case("tests_compare", "{{ 2 is eq 2 }} {{ 2 is equalto 3 }} {{ 2 is ne 3 }} {{ 2 is lt 3 }} {{ 2 is gt 3 }} {{ 2 is le 2 }} {{ 2 is ge 3 }} {{ 'a' is in 'cat' }} {{ 2 is in [1] }}")
case("tests_misc", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 'Ab' is lower }} {{ range is callable }} {{ 'x' is callable }} {{ none is sameas none }} {{ 'upper' is filter }} {{ 'odd' is test }} {{ 'nope' is filter }}")
case("test_not", "{{ missing is not defined }} {{ 1 is not none }} {{ none is not none }}")
case("test_none_chain", "{% if d.n is none and d.a is not none %}ok{% endif %}")
case("test_string_arg_forms", "{{ 'b' is in ['a', 'b'] }} {{ [1] is sequence }} {{ d is mapping }}")

# ---------------------------------------------------------------- filters
case("f_trim", "[{{ s|trim }}][{{ 'xxhixx'|trim('x') }}][{{ '\u3000a\u2003'|trim }}][{{ 5|trim }}][{{ missing|trim }}]")
case("f_case", "{{ s|upper }} {{ s|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello big-world (x) [y]{z}<w> it\\'s'|title }} {{ u|upper }} {{ 'ÀÉÎ'|lower }} {{ 'straße'|upper }}")
case("f_length", "{{ nums|length }} {{ u|length }} {{ d|count }} {{ missing|length }} {{ ''|length }} {{ range(5)|length }}")
case("f_first_last", "{{ nums|first }} {{ nums|last }} {{ 'abc'|first }} {{ 'abc'|last }} {{ d|first }} [{{ []|first }}] {{ u|last }}")
case("f_join", "{{ nums|join(', ') }} {{ words|join }} {{ people|join('/', attribute='name') }} {{ [1, none, 'x']|join('-') }} {{ 'abc'|join('.') }}")
case("f_default", "{{ missing|default('dflt') }} {{ none|default('dflt') }} {{ ''|default('dflt', true) }} {{ 0|d(5, boolean=true) }} {{ d.a|default(9) }} [{{ missing|d }}]")
case("f_list_string", "{{ 'abc'|list }} {{ d|list }} {{ (1, 2)|list }} {{ 5|string }} {{ none|string }} {{ [1, 'a']|string }} {{ range(3)|list }}")
case("f_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }} {{ 123|replace('2', 'x') }}")
case("f_int_float", "{{ '42'|int }} {{ '42.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ '0x1A'|int(0, 16) }} {{ '  12 '|int }} {{ 3.99|int }} {{ true|int }} {{ none|int }} {{ '3.5'|float }} {{ 'x'|float }} {{ 2|float }} {{ '1e3'|float }} {{ ' -2.5 '|float }} {{ '1_000'|int }}")
case("f_abs_round", "{{ -5|abs }} {{ (-5)|abs }} {{ -2.5|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 2.675|round(2) }} {{ 2.1|round(0, 'ceil') }} {{ 2.9|round(method='floor') }} {{ 42|round }} {{ 1234|round(-2) }} {{ 0.5|round }} {{ -0.5|round }}")
case("f_tojson", "{{ d|tojson }}|{{ u|tojson }}|{{ [1, 2.5, none, true, 'q\"\\\\'] |tojson }}|{{ 'a<b>&\\'c'|tojson }}")
case("f_tojson_indent", "{{ tools|tojson(indent=2) }}\n{{ {'a': [], 'b': {}, 'c': [1, {'d': 2}]}|tojson(indent=4) }}")
case("f_tojson_options", "{{ d|tojson(sort_keys=true) }}|{{ u|tojson(ensure_ascii=true) }}|{{ {'a': [1, 2]}|tojson(separators=(',', ':')) }}|{{ {1: 'i', 2.5: 'f', none: 'n', true: 'b'}|tojson }}")
case("f_tojson_control_chars", "{{ 'line\\nbreak\\ttab\\x01\\x7f\\u2028'|tojson }}")
case("f_tojson_floats", "{{ [1.0, 0.1, 1e-07, 1e22, 123456789.125, -0.0]|tojson }}")
case("f_map", "{{ people|map(attribute='name')|list }} {{ people|map(attribute='city', default='?')|list }} {{ nums|map('string')|join(',') }} {{ words|map('upper')|list }} {{ ['a', 'b']|map('replace', 'a', 'x')|list }}")
case("f_select_reject", "{{ nums|select('odd')|list }} {{ nums|reject('odd')|list }} {{ [0, 1, '', 'a', none]|select|list }} {{ nums|select('gt', 2)|list }} {{ nums|select('>', 2)|list }} {{ words|select('in', ['apple', 'cherry'])|list }}")
case("f_selectattr", "{{ people|selectattr('age', 'equalto', 31)|map(attribute='name')|list }} {{ people|rejectattr('city')|map(attribute='name')|list }} {{ messages|selectattr('role', 'eq', 'user')|list|length }} {{ people|selectattr('city', 'defined')|list|length }}")
case("f_generator_truthy", "{{ 'T' if ([]|select) else 'F' }} {{ 'T' if (nums|select('odd')) else 'F' }}")
case("f_generator_consumed_once", "{% set g = nums|select('odd') %}{{ g|list }}{{ g|list }}{{ g|first is defined }}")
case("f_items", "{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}|{% for k, v in missing|items %}x{% endfor %}")
case("f_dictsort", "{{ d|dictsort }} {{ d|dictsort(true) }} {{ d|dictsort(reverse=true) }} {{ {'x': 2, 'y': 1}|dictsort(by='value') }}")
case("f_sort", "{{ nums|sort }} {{ nums|sort(reverse=true) }} {{ words|sort }} {{ words|sort(case_sensitive=true) }} {{ people|sort(attribute='age')|map(attribute='name')|list }} {{ people|sort(attribute='age,name')|map(attribute='name')|list }} {{ people|sort(attribute='age', reverse=true)|map(attribute='name')|list }}")
case("f_unique", "{{ words|unique|list }} {{ words|unique(case_sensitive=true)|list }} {{ [1, 2, 1, 3, 2]|unique|list }} {{ people|unique(attribute='age')|map(attribute='name')|list }}")
case("f_min_max_sum", "{{ nums|min }} {{ nums|max }} {{ words|min }} {{ words|max }} {{ words|max(case_sensitive=true) }} {{ people|max(attribute='age') }} {{ nums|sum }} {{ people|sum(attribute='age') }} {{ floats|sum }} {{ [[1], [2]]|sum(start=[]) }} [{{ []|max }}]")
case("f_reverse", "{{ nums|reverse|list }} {{ 'abc'|reverse }} {{ u|reverse }} {{ (nums|reverse) is iterable }}")
case("f_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(width='> ', blank=true) }}|{{ 'x\\r\\ny'|indent(1) }}")
case("f_center_wordcount", "[{{ 'ab'|center(7) }}][{{ 'abc'|center(6) }}] {{ 'hello big world_x 42'|wordcount }}")
case("f_escape_safe", "{{ '<a href=\"x\">&\\'</a>'|e }} {{ '<b>'|safe }} {{ ('<b>'|safe)|e }} {{ '<i>'|escape is escaped }}")
case("f_format", "{{ '%s-%s'|format('a', 'b') }} {{ '%(x)s'|format(x=1) }} {{ '%.3f'|format(2.0) }}")
case("f_batch_slice", "{{ [1, 2, 3, 4, 5]|batch(2)|list }} {{ [1, 2, 3]|batch(2, 'x')|list }} {{ [1, 2, 3, 4, 5]|slice(2)|list }} {{ [1, 2, 3, 4]|slice(3, 0)|list }}")
case("f_groupby", "{% for g in people|groupby('age') %}{{ g.grouper }}:{{ g.list|map(attribute='name')|join(',') }};{% endfor %}|{% for city, ps in people|groupby('city', default='none') %}{{ city }}={{ ps|length }};{% endfor %}")
case("f_truncate_striptags", "{{ 'hello world this is long'|truncate(12) }}|{{ 'hello world this is long'|truncate(12, true) }}|{{ 'short'|truncate(10) }}|{{ '<p>a  <b>bold</b>\\n text &amp; more</p>'|striptags }}")
case("f_urlencode_filesize", "{{ 'a b/c?d=é'|urlencode }} {{ {'a': 'x y', 'b': 1}|urlencode }} {{ 1500|filesizeformat }} {{ 1|filesizeformat }} {{ 2048|filesizeformat(true) }} {{ 12|filesizeformat }}")
case("f_attr", "[{{ d|attr('a') }}][{{ d|attr('keys') is callable }}]")
case("f_chain_precedence", "{{ 'a' ~ 'b'|upper }} {{ -3|abs }} {{ nums|length + 1 }} {{ 'x' + s|trim }}")
case("f_filter_block", "{% filter upper %}hi {{ 'there' }}{% endfilter %}|{% filter replace('a', 'o')|upper %}banana{% endfilter %}")
case("f_set_block_filter", "{% set x | trim | upper %}  padded  {% endset %}[{{ x }}]")

# ---------------------------------------------------------------- string methods
case("m_strip", "[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}][{{ 'xxaxx'.strip('x') }}][{{ '--a-'.lstrip('-') }}][{{ '..a..'.rstrip('.') }}][{{ 'abcba'.strip('ab') }}]")
case("m_split", "{{ 'a,b,,c'.split(',') }} {{ '  a  b c '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }} {{ '  a  b c '.rsplit(None, 1) }} {{ 'x</think>y</think>z'.split('</think>')[-1] }} {{ ''.split() }} {{ ''.split(',') }}")
case("m_splitlines", "{{ 'a\\nb\\r\\nc\\rd'.splitlines() }} {{ 'a\\nb\\n'.splitlines(true) }}")
case("m_starts_ends", "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith('lo') }} {{ 'hello'.startswith(('x', 'h')) }} {{ 'hello'.endswith('x') }}")
case("m_case", "{{ 'ab cd'.upper() }} {{ 'AB'.lower() }} {{ \"hello they're 3rd\".title() }} {{ 'hELLO'.capitalize() }} {{ 'aBc'.swapcase() }}")
case("m_replace_find", "{{ 'a-b-c'.replace('-', '+') }} {{ 'a-b-c'.replace('-', '', 1) }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.index('e') }} {{ 'banana'.count('an') }} {{ u.find('日') }}")
case("m_join_pad", "{{ ', '.join(['a', 'b']) }} {{ '-'.join('abc') }} [{{ 'ab'.center(6, '*') }}][{{ 'ab'.ljust(4) }}][{{ 'ab'.rjust(4, '0') }}][{{ '42'.zfill(5) }}][{{ '-42'.zfill(5) }}]")
case("m_is", "{{ 'abc'.isalpha() }} {{ '123'.isdigit() }} {{ 'a1'.isalnum() }} {{ ' \\t'.isspace() }} {{ 'abc'.islower() }} {{ 'ABC'.isupper() }} {{ 'Hello World'.istitle() }} {{ ''.isalpha() }} {{ 'é'.isalpha() }}")
case("m_partition", "{{ 'a=b=c'.partition('=') }} {{ 'a=b=c'.rpartition('=') }} {{ 'abc'.partition('x') }} {{ 'prefix_x'.removeprefix('prefix_') }} {{ 'x.txt'.removesuffix('.txt') }}")
case("m_format_spec", "{{ '{:+d} {: d} {:#x} {:o} {:b} {:e} {:.3g} {:%}'.format(5, 5, 255, 8, 5, 12345.678, 0.000123456, 0.25) }}|{{ '{:*^9}'.format('mid') }}|{{ '{0!r} {0!s}'.format('q') }}|{{ '{a[0]} {b.x}'.format(a=[7], b={'x': 8}) }}|{{ '{{literal}}'.format() }}")
case("m_list_methods", "{{ [1, 2, 1].count(1) }} {{ ['a', 'b'].index('b') }} {{ (3, 4).index(4) }}")
case("m_expandtabs", "{{ 'a\\tb'.expandtabs(4) }}")

# ---------------------------------------------------------------- loops
case("loop_vars", "{% for x in ['a', 'b', 'c'] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.depth }};{% endfor %}")
case("loop_prev_next", "{% for x in [1, 2, 3] %}[{{ loop.previtem }}|{{ loop.nextitem }}]{% endfor %}")
case("loop_prev_defined", "{% for x in [1, 2] %}{{ loop.previtem is defined }}{{ loop.nextitem is defined }}{% endfor %}")
case("loop_cycle_changed", "{% for x in [1, 1, 2, 3, 3] %}{{ loop.cycle('a', 'b') }}{% if loop.changed(x) %}*{% endif %}{% endfor %}")
case("loop_filter", "{% for x in nums if x > 1 %}{{ x }}:{{ loop.index }}/{{ loop.length }}{{ ',' if not loop.last }}{% endfor %}")
case("loop_else", "{% for x in [] %}x{% else %}empty{% endfor %}|{% for x in [1] if x > 5 %}x{% else %}filtered{% endfor %}|{% for x in missing %}x{% else %}undef{% endfor %}")
case("loop_unpack", "{% for a, b in [[1, 2], (3, 4), 'xy'] %}{{ a }}{{ b }};{% endfor %}{% for k, v in {'p': 1}.items() %}{{ k }}{{ v }}{% endfor %}")
case("loop_nested_unpack", "{% for (a, b), c in [((1, 2), 3)] %}{{ a }}{{ b }}{{ c }}{% endfor %}")
case("loop_dict_iter", "{% for k in d %}{{ k }},{% endfor %}")
case("loop_string_iter", "{% for c in u %}[{{ c }}]{% endfor %}")
case("loop_nested", "{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }}{{ loop.index }} {% endfor %}|{{ loop.index }}{% endfor %}")
case("loop_break_continue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 5 %}{% break %}{% endif %}{{ i }}{% endfor %}")
case("loop_break_nested", "{% for i in range(3) %}{% for j in range(3) %}{% if j == 1 %}{% break %}{% endif %}{{ i }}{{ j }} {% endfor %}{% endfor %}")
case("loop_scoping", "{% set x = 0 %}{% for i in range(3) %}{% set x = x + i %}{{ x }}{% endfor %}|{{ x }}")
case("loop_scoping_per_iteration", "{% set x = 9 %}{% for i in range(3) %}{{ x }}{% set x = i %}{{ x }},{% endfor %}{{ x }}")
case("loop_var_after_loop", "{% for i in range(3) %}{% endfor %}[{{ i }}]")
case("loop_recursive", "{% for n in [{'v': 1, 'c': [{'v': 2, 'c': []}, {'v': 3, 'c': [{'v': 4, 'c': []}]}]}] recursive %}{{ n.v }}@{{ loop.depth }}({{ loop(n.c) }}){% endfor %}")
case("loop_over_range_step", "{% for i in range(10, 0, -3) %}{{ i }} {% endfor %}")
case("loop_index_in_filter_error", "{% for x in [1] if loop.index %}{{ x }}{% endfor %}")
case("loop_messages_pattern", "{% for m in messages %}{% if loop.first and m.role == 'system' %}S:{{ m.content }}{% elif m.role == 'user' %}U:{{ m.content }}{% else %}A:{{ m.content }}{% endif %}{% if not loop.last %}\n{% endif %}{% endfor %}")

# ---------------------------------------------------------------- set and namespace
case("set_basic", "{% set a = 1 %}{% set b, c = 2, 3 %}{% set t = 4, 5 %}{{ a }}{{ b }}{{ c }}{{ t }}")
case("set_block", "{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]")
case("set_in_if_visible", "{% if true %}{% set y = 'seen' %}{% endif %}{{ y }}")
case("namespace", "{% set ns = namespace(count=0, items=[]) %}{% for i in range(4) %}{% set ns.count = ns.count + i %}{% set ns.items = ns.items + [i] %}{% endfor %}{{ ns.count }} {{ ns.items }} {{ ns['count'] }}")
case("namespace_from_dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}[{{ ns.c }}]")
case("namespace_set_non_ns_error", "{% set x = 1 %}{% set x.y = 2 %}")
case("dict_global", "{{ dict(a=1, b=2) }} {{ dict([('x', 1)]) }}")
case("with_block", "{% set a = 5 %}{% with a = 1, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}")
case("block_tag", "{% block content %}in block{% endblock %}|{% block other %}{{ 1 }}{% endblock other %}")
case("generation_tag", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}{% endif %}{% endfor %}")

# ---------------------------------------------------------------- macros
case("macro_defaults", "{% macro m(a, b='B', c=a ~ '!') %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }}|{{ m(1, 2) }}|{{ m(1, c=3) }}|{{ m(b=2, a=1) }}")
case("macro_varargs_kwargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, x=4) }}|{{ m(1) }}")
case("macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}")
case("macro_bad_kwarg", "{% macro m(a) %}{% endmacro %}{{ m(1, x=2) }}")
case("macro_missing_arg", "{% macro m(a, b) %}[{{ a }}][{{ b }}]{% endmacro %}{{ m(1) }}")
case("macro_caller", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}{% endcall %}")
case("macro_caller_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x, loop.index) }}{% endfor %}{% endmacro %}{% call(v, i) each(['a', 'b']) %}{{ i }}={{ v }};{% endcall %}")
case("macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(6) }}")
case("macro_sees_globals_at_call", "{% macro m() %}{{ x }}{% endmacro %}{% set x = 5 %}{{ m() }}{% set x = 6 %}{{ m() }}")
case("macro_scope_isolated", "{% macro m() %}{% set inner = 1 %}{{ inner }}{% endmacro %}{{ m() }}[{{ inner }}]")
case("macro_returns_string", "{% macro m() %}42{% endmacro %}{{ m() ~ '!' }} {{ m()|int + 1 }} {{ m() is string }}")
case("macro_whitespace", "{%- macro m(x) -%}\n  [{{ x }}]\n{%- endmacro -%}\n{{ m(1) }}{{ m(2) }}")
case("macro_json_type_pattern", """{%- macro t(spec) %}{%- if spec.type == 'array' %}{{- 'list[' + t(spec['items']) + ']' }}{%- elif spec.type is string %}{{- spec.type }}{%- elif spec.type is iterable %}{{- 'Union[' }}{%- for x in spec.type %}{{- t({'type': x}) }}{%- if not loop.last %},{% endif %}{%- endfor %}]{%- endif %}{%- endmacro %}{{ t({'type': 'array', 'items': {'type': ['int', 'str']}}) }}""")

# ---------------------------------------------------------------- globals and errors
case("raise_exception", "{{ raise_exception('Custom failure: ' ~ 3) }}")
case("raise_in_branch", "{% if messages|length > 2 %}{{ raise_exception('too many') }}{% endif %}ok")
case("range_forms", "{{ range(3)|list }} {{ range(2, 5)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}")
case("range_too_big", "{{ range(100001)|length }}")
case("cycler_joiner", "{% set c = cycler('a', 'b') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}|{% set j = joiner(', ') %}{% for x in [1, 2, 3] %}{{ j() }}{{ x }}{% endfor %}")
case("err_undefined_plus", "{{ missing + 1 }}")
case("err_str_plus_int", "{{ 'a' + 1 }}")
case("err_int_plus_str", "{{ 1 + 'a' }}")
case("err_str_plus_none", "{{ 'a' + none }}")
case("err_list_plus_tuple", "{{ [1] + (2,) }}")
case("err_iterate_none", "{% for x in none %}{% endfor %}")
case("err_iterate_int", "{% for x in 5 %}{% endfor %}")
case("err_unsafe_append", "{% set l = [] %}{{ l.append(1) }}")
case("err_unsafe_update", "{{ d.update({'x': 1}) }}")
case("unsafe_printed_is_empty", "[{{ [].append }}]")
case("err_compare_types", "{{ 1 < 'a' }}")
case("err_division_zero", "{{ 1 / 0 }}")
case("err_floor_division_zero", "{{ 1 // 0 }}")
case("err_mod_zero", "{{ 1 % 0 }}")
case("err_call_non_callable", "{{ 'abc'() }}")
case("err_call_undefined", "{{ missing() }}")
case("err_length_of_int", "{{ 5|length }}")
case("err_length_of_generator", "{{ nums|select('odd')|length }}")
case("err_tojson_undefined", "{{ missing|tojson }}")
case("err_last_generator", "{{ nums|select('odd')|last }}")
case("err_unpack_count", "{% for a, b in [[1, 2, 3]] %}{% endfor %}")
case("err_unpack_few", "{% set a, b = [1] %}")
case("err_in_int", "{{ 1 in 5 }}")
case("err_in_str_int", "{{ 1 in 'abc' }}")
case("err_split_empty_sep", "{{ 'abc'.split('') }}")
case("err_not_all_converted", "{{ 'x' % 1 }}")
case("err_dictsort_list", "{{ [1]|dictsort }}")
case("err_neg_str", "{{ -'a' }}")
case("err_items_of_list", "{{ [1]|items|list }}")
case("err_sort_mixed", "{{ [1, 'a']|sort }}")
case("err_index_missing", "{{ 'abc'.index('z') }}")
case("err_undefined_in_cond_attr", "{% if missing.x %}{% endif %}")

with_ctx_none_tools = {"tools": None}
case("err_hermes_like_none_iter", "{% for t in tools %}{{ t }}{% endfor %}", with_ctx_none_tools)

# ---------------------------------------------------------------- corners found by differential fuzzing
case("lazy_generator_errors", "{% set g = nums|map('nosuchfilter') %}{{ 'T' if g else 'F' }}{% set h = people|map(attribute='name')|unique %}{{ h|list }}{{ [1]|select('nosuchtest') is defined }}")
case("lazy_generator_error_on_use", "{{ nums|map('nosuchfilter')|list }}")
case("lazy_rejectattr_no_args", "{{ 'T' if (nums|rejectattr) else 'F' }}")
case("unknown_filter_in_untaken_if", "{% if false %}{{ x|nosuchfilter }}{% elif none is nosuchtest %}{% endif %}{{ 'ok' if true else y|nosuch }}")
case("unknown_filter_in_taken_if", "{% if true %}{{ x|nosuchfilter }}{% endif %}")
case("unknown_filter_in_loop_in_if", "{% if false %}{% for x in [] %}{{ x|nosuchfilter }}{% endfor %}{% endif %}")
case("empty_subscript", "[{{ d[] }}][{{ {(): 'empty tuple key'}[] }}]")
case("sort_undefined_keys", "{{ people|sort(attribute='nope')|map(attribute='name')|list }} {{ nums|sort(attribute='x')|list }}")
case("slice_errors_undefined", "{{ missing[1:] }}")
case("slice_errors_none", "{{ d.n[1:] }}")
case("slice_errors_index_type", "{{ nums['a':] }}")
case("slice_errors_generator", "{{ (nums|select)[1:] }}")
case("range_slice", "{{ range(10)[2:5] }} {{ range(10)[::-1] }} {{ range(1, 10, 3)[1:] }}")
case("percent_mapping_like", "{{ 'x' % [1] }}|{{ 'x%s' % missing }}|{{ 'x%s' % [1] }}|{{ '%s' % {'a': 1} }}|{{ '%s' % d }}")
case("callable_tests", "{{ missing is callable }} {{ (d|attr('nope')) is callable }} {{ d.get is callable }} {{ cycler(1) is callable }} {{ joiner() is callable }}")
case("splitlines_bad_arg", "{{ 'a\nb'.splitlines(missing) }}")
case("strip_bad_arg", "{{ 'abc'.strip(missing) }}")
case("for_trailing_comma_error", "{% for k, in d %}{% endfor %}")
case("undefined_dunder_attr", "[{{ missing.__class__ }}][{{ d.__class__ }}]")
case("int_of_undefined", "{{ missing|int }}")
case("float_of_undefined", "{{ missing|float }}")
case("abs_of_undefined", "{{ missing|abs }}")
case("indent_of_undefined", "{{ missing|indent }}")
case("tojson_indent_undefined", "{{ 'x'|tojson(indent=missing) }}")
case("round_bad_precision", "{{ 1.5|round(missing) }}")
case("batch_undefined_count", "{{ [1, 2]|batch(missing)|list }}")
case("dict_of_undefined", "{{ dict(missing) }}")
case("map_attribute_undefined", "{{ people|map(attribute=missing)|list }}")
case("percent_single_use", "{{ 'x%sx%s' % missing }}")
case("pad_fill_undefined", "{{ 'ab'.rjust(4, missing) }}")
case("round_method_undefined", "{{ 2.5|round(method=missing) }}")
case("tojson_separators_str", "{{ {'a': [1, 2]}|tojson(separators=',:') }}")
case("float_pow_overflow", "{{ 1e308 ** 10 }}")
case("int_base_out_of_range", "{{ '0x1A'|int(0, 162) }} {{ '12'|int(7, 1) }}")
case("range_undefined_arg", "{{ range(1, missing)|list }}")
case("slice_undefined_count", "{{ [1, 2, 3]|slice(missing)|list }}")
case("truncate_non_string", "{{ [1, 2]|truncate(10) }}")
case("truncate_number", "{{ 0.1|truncate(10) }}")
case("indent_non_string", "{{ range(3)|indent }}")
case("map_falsy_input", "{{ missing|map('nosuchfilter')|list }} {{ false|map(attribute='x')|list }}")
case("joiner_with_args", "{% set j = joiner() %}{{ j('x') }}")
case("format_grouping_str", "{{ '{:,}'.format('ab') }}")
case("constant_slice_folded", "[{{ 'abcdef'['x':] }}][{{ 5[1:] }}]")
case("dictsort_reverse_str", "{{ d|dictsort(reverse='yes') }}")
case("items_lazy", "{{ ([1]|items) is defined }}")
case("test_extra_arg_typeonly", "{{ 'odd' is test 'int' }}")

# ---------------------------------------------------------------- numbers at their edges (model audit)
# Python's integers have no bound and ours are 64-bit. Cases named *_bigint are those where jinja2
# prints an integer outside int64: ours must raise OverflowError instead of printing a wrong number
# (tests/model/tmpl_case.h checks both: that the recorded output holds such an integer, and that
# our render fails so). `huge * 10` makes inf at render time (jinja2 folds a constant inf into its
# generated Python as the name `inf`, a NameError).
HUGE = {"huge": 1e308}
case("round_precision_bounds", "{{ 1e308|round(-400) }} {{ -1e308|round(-400) }} {{ 1.5|round(-309) }} {{ 42|round(-400) }} {{ 1e308|round(-308) }} {{ 5e307|round(-308) }} {{ 1.5|round(400) }} {{ 1e-310|round(305) }} {{ 5e-324|round(323) }} {{ 5e-324|round(324) }} {{ (huge * 10)|round(-2) }} {{ (huge * 10 - huge * 10)|round(3) }}", HUGE)
case("round_negative_exact", "{{ 2.5|round(-1) }} {{ 25.0|round(-1) }} {{ 25.0000001|round(-1) }} {{ 35.0|round(-1) }} {{ -25.5|round(-1) }} {{ 9.5e22|round(-22) }} {{ 123456.5|round(-2) }} {{ 0.7|round(-1) }} {{ 1e22|round(-23) }} {{ -0.4|round }}")
case("round_int_edges", "{{ 9223372036854775807|round(-18) }} {{ -9223372036854775807|round(-2) }} {{ 5000000000000000000|round(-19) }} {{ 15|round(-1) }} {{ 25|round(-1) }} {{ -15|round(-1) }} {{ 7|round(-20) }} {{ true|round(-1) }}")
case("round_overflow", "{{ 1.7e308|round(-308) }}")
case("round_int_bigint", "{{ 9223372036854775807|round(-1) }}")
case("round_int_neg_bigint", "{{ -9000000000000000000|round(-19) }}")
case("round_ceil_floor_edges", "{{ 1.23456789e30|round(25, 'ceil') }} {{ 0.1|round(30, 'floor') }} {{ 12345|round(2, 'ceil') }} {{ 12345|round(-2, 'ceil') }} {{ -0.5|round(0, 'ceil') }} {{ 2.5|round(300, 'floor') }} {{ 1.5|round(308, 'ceil') }} {{ 1e300|round(-300, 'floor') }} {{ -1.25|round(1, 'floor') }}")
case("round_ceil_tiny_scale", "{{ 1e300|round(-400, 'ceil') }}")
case("round_floor_inf", "{{ (huge * 10)|round(1, 'floor') }}", HUGE)
case("round_ceil_nan", "{{ (huge * 10 - huge * 10)|round(1, 'ceil') }}", HUGE)
case("round_ceil_scale_too_big", "{{ 1.5|round(309, 'ceil') }}")
case("int_of_float_bounds", "{{ 9007199254740992.0|int }} {{ 9007199254740993|float|int }} {{ -9223372036854775808.0|int }} {{ 9.2e18|int }} {{ 9.223372036854775e18|int }} {{ -9.2e18|int }} {{ 1e-300|int }} {{ -0.9|int }} {{ (huge * 10 - huge * 10)|int }} {{ '1e400'|int }} {{ '-inf'|int(7) }} {{ '9223372036854775807'|int }} {{ '-9223372036854775808'|int }} {{ '9.2e18'|int }} {{ '1e18'|int }}", HUGE)
case("int_of_inf", "{{ (huge * 10)|int }}", HUGE)
case("int_of_float_bigint", "{{ 1e300|int }}")
case("int_of_2_63_bigint", "{{ 9223372036854775807.0|int }}")
case("int_of_str_float_bigint", "{{ '1e300'|int }}")
case("int_of_str_digits_bigint", "{{ '99999999999999999999'|int }}")
case("int_of_str_hex_bigint", "{{ '0x8000000000000000'|int(0, 16) }}")
case("percent_d_float_bigint", "{{ '%d' % 1e300 }}")
case("percent_d_inf", "{{ '%d' % (huge * 10) }}", HUGE)
case("percent_d_nan", "{{ '%d' % (huge * 10 - huge * 10) }}", HUGE)
case("f_slice_zero_lazy", "{{ [1, 2, 3]|slice(0) is defined }} {{ [1, 2, 3]|slice(-2)|list }}")
case("f_slice_zero", "{{ [1, 2, 3]|slice(0)|list }}")
case("f_slice_zero_empty", "{% for s in []|slice(0) %}{% endfor %}")
case("percent_star", "[{{ '%*s|%-*s|%.*f|%*.*f|%*d|%.*f|%0*d|%*s|%.*s|%-*d|%*c' % (5, 'a', 5, 'b', 2, 3.14159, 8, 2, 2.5, -5, 3, -2, 3.14159, 5, 42, true, 'x', 2, 'abcdef', 3, -1, 3, 65) }}]"
     "[{{ '%-0*.*e|%+*.*e' % (12, 3, 12345.678, 12, 3, 12345.678) }}][{{ '%*s' % (0, 'z') }}]")
case("percent_star_not_int", "{{ '%*s' % (2.0, 'a') }}")
case("percent_star_none_prec", "{{ '%.*s' % (none, 'a') }}")
case("percent_star_short", "{{ '%*s' % (5,) }}")
case("percent_star_single_arg", "{{ '%*s' % 5 }}")
case("percent_star_keyed", "{{ '%(a)*s' % {'a': 1} }}")
case("percent_star_extra_arg", "{{ '%*s' % (5, 'a', 3) }}")
case("percent_keyed_then_positional", "{{ '%(a)s %s' % {'a': 1} }}")
case("percent_percent_after_key", "{{ '%(a)%|%s' % {'a': 1} }}")
case("percent_unsupported_index", "{{ 'é%é' % 1 }}")
case("percent_c_flags", "[{{ '%05c|% c|%+c|%05s|%-3c|%#c|%.2c' % (65, 65, 'a', 'x', 'é', 66, 'ü') }}]")
case("percent_c_long_string", "{{ '%c' % 'abc' }}")
case("percent_c_float", "{{ '%c' % 1.5 }}")
case("percent_e_str", "{{ '%e' % 'x' }}")
case("percent_x_none", "{{ '%x' % none }}")
case("percent_i_list", "{{ '%i' % ([1],) }}")

# ---------------------------------------------------------------- Unicode: Python's str beyond ASCII
# Character classes and case mappings as CPython defines them (unicodedata's categories, bidi
# classes, numeric types, the derived Uppercase/Lowercase/Cased/Case_Ignorable properties,
# SpecialCasing's one-to-many mappings, final sigma). Characters assigned since Unicode 6 only,
# so that the tables of any recent Python and ICU agree.
UCHARS = ["a", "é", "ǅ", "ʰ", "ª", "ß", "Σ", "ς", "K", "𝔄", "Ⅻ", "ⅻ", "²", "٣", "½", "一", "〇",
          "\u0301", "_", "🚀", "\u00a0", "\u2028", "\u200b", "\u1680", "\u180e", "\x1c", "\x85",
          "\u3000", "\u2007"]
UCLASSES = ("{% for c in chars %}{{ c|tojson }}:{{ [c.isalpha(), c.isdecimal(), c.isdigit(), "
            "c.isnumeric(), c.isalnum(), c.isspace(), c.islower(), c.isupper(), c.istitle()] }}\n"
            "{% endfor %}")
case("u_char_classes", UCLASSES, {"chars": UCHARS})
case("u_string_classes", "{{ ['ǅungla'.istitle(), 'ΣΑΣ'.isupper(), 'ʰa'.islower(), 'ǅ'.isupper(), "
     "'Ⅻ'.isupper(), '²³'.isdigit(), '²³'.isdecimal(), '一二'.isnumeric(), 'é1'.isalnum(), "
     "'\u2003\u00a0'.isspace(), '\u200b'.isspace(), 'Aǅ'.istitle(), 'ǅa Ǉb'.istitle()] }}")
UCASE = "ǆemal ΣΑΣ ὈΔΥΣΣΕΎΣ ﬁne ŉ İstanbul straße ᾳ ΑΣ' aΣb Σ ﬀ ǈ K ΐ"
case("u_upper_lower", "{{ s|upper }}\n{{ s|lower }}\n{{ s.upper() }}\n{{ s.lower() }}", {"s": UCASE})
case("u_title_capitalize", "{{ s.title() }}\n{{ s.capitalize() }}\n{{ s|title }}\n{{ s|capitalize }}",
     {"s": "ǆemal ßen ﬁne o'neil 3rd ΑΣ. αΣ-βΑΣ ǳ ΣΑΣ ΒΑΣ-ΑΣΑ ᾳx ŉ"})
case("u_swapcase_casefold", "{{ s.swapcase() }}\n{{ s.casefold() }}", {"s": "ΑΣ ǅ ß ﬁ İ Σa ﬀ K Å ΣΑΣ ǈx ΐ ᾳ"})
case("u_repr_escapes", "{{ [s] }}", {"s": "a\u00adb\u200b\u2028\x7f\u0378\ue000é🚀\u00a0\U000e0001\u061c \t\x85\U0010ffff"})
case("u_wordcount", "{{ s|wordcount }}", {"s": "héllo wörld ²³ 一二 Ⅻ ½ a_b ǅx \u0301 🚀 x\u200by"})
case("u_split_strip", "{{ s.split() }} [{{ s.strip() }}] {{ s.split()|length }}",
     {"s": "\u3000a\u2003b\u00a0c\u200bd\x1ce\u180ef\u2029"})
case("u_strip_blocks", "a\u2003\u3000{%- if true %}b{% endif %}\u00a0\n{{- 'c' -}}\u2028\u1680d")
case("u_identifiers", "{{ é }}|{% set café = 1 %}{{ café }}|{% set x\u0301 = 2 %}{{ x\u0301 }}|"
     "{% set ǅa = 3 %}{{ ǅa }}|{% set ℘ = 4 %}{{ ℘ }}|{{ a·b }}")
case("u_ident_superscript", "{{ x² }}")
case("u_ident_digit_start", "{{ ²x }}")
case("u_unexpected_char", "é {{ → }}")
case("u_unexpected_invisible", "{{ x\u200bz }}")
case("u_int_float_strip", "{{ '\u00a012\u2003'|int }} {{ ' 1.5\u3000'|float }} {{ '\u20071'|int + 1 }}")
case("u_center_pad", "[{{ 'é中'.center(6, '·') }}][{{ 'ß'.ljust(3, '—') }}][{{ 'ǅ'.rjust(3) }}][{{ 'ab'.zfill(4) }}]")

# ---------------------------------------------------------------- template-shaped
case("chatml_full", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
case("llama2_like", "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
case("tools_json_pattern", "{%- for tool in tools %}\n    {{- tool | tojson(indent=4) }}\n    {{- '\\n\\n' }}\n{%- endfor %}\n{{- tools[0].function.parameters.properties | items | list }}")
case("multiline_indented_template", """{%- if messages[0].role == 'system' %}
    {%- set sys = messages[0].content %}
{%- endif %}
<sys>{{ sys }}</sys>
{% for m in messages[1:] %}
    {% if m.role == 'user' %}
    U: {{ m.content }}
    {% else %}
    A: {{ m.content }}
    {% endif %}
{% endfor %}
done
""")
case("date_default", "{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}{%- endif %}{{ date_string }}")
case("messages_reassign", "{%- set messages = messages[1:] %}{{ messages|length }}{{ messages[0].role }}")


def main():
    out = []
    for name, template, context in CASES:
        try:
            rendered = env.from_string(template).render(**context)
            out.append({"name": name, "template": template, "context": context, "rendered": rendered})
        except Exception as e:  # the expected error: "Type: message"
            out.append({"name": name, "template": template, "context": context,
                        "error": f"{type(e).__name__}: {e}"})
    json.dump({"generator": "tests/model/gen_tmpl_cases.py", "jinja2": jinja2.__version__, "cases": out},
              sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
