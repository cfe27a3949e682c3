#!/usr/bin/env python3
"""tensorframe's kernel generator: src/ops/formulas.txt -> every backend's
elementwise kernels.

Each formula is parsed once into a small expression tree and printed in
each target language:

  formulas.h          X-macro lists: which ops have a formula, an int form,
                      a SIMD body, a plain public function, f32 autocast
  formulas_ref.inc    scalar C for the CPU reference (float, double, int64)
  formulas_simd.inc   GCC vector-extension bodies for fast_kernels.inc
  portable_kernels.cl gpu_common/kernels.cl with its `//@formulas` lines
                      replaced (OpenCL C, also compiled as CUDA and HIP)
  webgpu_kernels.wgsl webgpu/kernels.wgsl likewise

Usage: gen_formulas.py FORMULAS OUT_DIR [--cl TEMPLATE] [--wgsl TEMPLATE]
"""
import os
import re
import sys

# ---- the formula language ----

TOKEN = re.compile(r"\s*(?:(\d+\.\d*(?:[eE][-+]?\d+)?|\d+(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)"
                   r"|([A-Za-z_]\w*)|(<=|>=|==|!=|&&|\|\||[-+*/<>!(),;=]))")
COMPARE = ("<", "<=", ">", ">=", "==", "!=")
PARAMS = ("alpha", "lo", "hi")

# Per function: C float, C double, C int64, OpenCL, WGSL (f32 / i32), SIMD
# vector form (None: no vector form, the op gets no SIMD body). `approx`
# vector forms mangle NaN, so a body that calls one keeps NaN explicitly.
FUNCS = {
    "exp":   dict(f="expf", d="exp", cl="exp", wgsl="exp_f32", simd="vexp_full", approx=True),
    "log":   dict(f="logf", d="log", cl="log", wgsl="log_f32"),
    "log1p": dict(f="log1pf", d="log1p", cl="log1p", wgsl="log1p_f32"),
    "expm1": dict(f="expm1f", d="expm1", cl="expm1", wgsl="expm1_f32"),
    "sqrt":  dict(f="sqrtf", d="sqrt", cl="sqrt", wgsl="sqrt"),
    "sin":   dict(f="sinf", d="sin", cl="sin", wgsl="sin_f32"),   # a driver's own may be 2^-11 off
    "cos":   dict(f="cosf", d="cos", cl="cos", wgsl="cos_f32"),
    "tanh":  dict(f="tanhf", d="tanh", cl="tanh", wgsl="tanh_f32"),
    "erf":   dict(f="erff", d="erf", cl="erf", wgsl="erf_f32"),
    "erfc":  dict(f="erfcf", d="erfc", cl="erfc", wgsl="erfc_f32", simd="verfc", approx=True),
    # the standard normal CDF, 0.5 erfc(-x / sqrt 2): a function of its own so
    # that a target may take exp(-x^2 / 2) from x itself (WGSL does), not from
    # the rounded x / sqrt 2, which costs x^2 ulps in the tail
    "ncdf":  dict(f="(0.5f * erfcf(-{0} * 0.70710678118654752440f))", d="(0.5 * erfc(-{0} * 0.70710678118654752440))",
                  cl="((C)0.5 * erfc(-{0} * (C)0.70710678118654752440))", wgsl="ncdf_f32", simd="vncdf", approx=True),
    "floor": dict(f="floorf", d="floor", cl="floor", wgsl="floor"),
    "ceil":  dict(f="ceilf", d="ceil", cl="ceil", wgsl="ceil"),
    "rint":  dict(f="rintf", d="rint", cl="rint", wgsl="round"),   # WGSL's round is half to even
    "pow":   dict(f="powf", d="pow", cl="pow", wgsl="pow_f32"),
    # inverse trigonometric and hyperbolic functions (the array API's); WGSL
    # through our own forms, as sin and cos: a driver's built-ins need only
    # be within a few ulp, or worse, of the true value
    "acos":  dict(f="acosf", d="acos", cl="acos", wgsl="acos_f32"),
    "asin":  dict(f="asinf", d="asin", cl="asin", wgsl="asin_f32"),
    "atan":  dict(f="atanf", d="atan", cl="atan", wgsl="atan_f32"),
    "acosh": dict(f="acoshf", d="acosh", cl="acosh", wgsl="acosh_f32"),
    "asinh": dict(f="asinhf", d="asinh", cl="asinh", wgsl="asinh_f32"),
    "atanh": dict(f="atanhf", d="atanh", cl="atanh", wgsl="atanh_f32"),
    "atan2": dict(f="atan2f", d="atan2", cl="atan2", wgsl="atan2_f32"),
    "copysign": dict(f="copysignf", d="copysign", cl="copysign", wgsl="copysign_f32"),
    "ipow":  dict(i="int_pow", cl="tf_ipow", wgsl="ipow_i32"),
    # bitwise operations for the int forms (each target defines them beside
    # ipow): the shifts take any count, past the width giving 0 (or -1
    # for a negative x shifted right), as do negative counts
    "bitand": dict(i="int_and", cl="tf_and", wgsl="and_i32"),
    "bitor":  dict(i="int_or", cl="tf_or", wgsl="or_i32"),
    "bitxor": dict(i="int_xor", cl="tf_xor", wgsl="xor_i32"),
    "shl":    dict(i="int_shl", cl="tf_shl", wgsl="shl_i32"),
    "shr":    dict(i="int_shr", cl="tf_shr", wgsl="shr_i32"),
}


class FormulaError(Exception):
    pass


def tokenize(text, where):
    pos, out = 0, []
    text = text.rstrip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise FormulaError(f"{where}: cannot read '{text[pos:pos + 12]}'")
        out.append(("num", m.group(1)) if m.group(1) else ("id", m.group(2)) if m.group(2) else ("op", m.group(3)))
        pos = m.end()
    return out


class Parser:
    """Recursive descent over the grammar in formulas.txt's header."""

    def __init__(self, tokens, names, where):
        self.t, self.i, self.names, self.where = tokens, 0, set(names), where

    def peek(self, value=None):
        if self.i >= len(self.t):
            return None
        tok = self.t[self.i]
        return tok if value is None or tok[1] == value else None

    def take(self, value=None):
        tok = self.peek(value)
        if tok is None:
            raise FormulaError(f"{self.where}: expected {value or 'more'} at token {self.i}")
        self.i += 1
        return tok

    def program(self):
        lets = []
        while self.peek("let"):
            self.take("let")
            name = self.take()[1]
            self.take("=")
            lets.append((name, self.expr()))
            self.take(";")
            self.names.add(name)
        result = self.expr()
        if self.i != len(self.t):
            raise FormulaError(f"{self.where}: unexpected '{self.t[self.i][1]}'")
        return lets, result

    def expr(self):
        node = self.conj()
        while self.peek("||"):
            self.take()
            node = ("bin", "||", node, self.conj())
        return node

    def conj(self):
        node = self.comparison()
        while self.peek("&&"):
            self.take()
            node = ("bin", "&&", node, self.comparison())
        return node

    def comparison(self):
        node = self.sum()
        tok = self.peek()
        if tok and tok[1] in COMPARE:
            self.take()
            node = ("bin", tok[1], node, self.sum())
        return node

    def sum(self):
        node = self.product()
        while self.peek("+") or self.peek("-"):
            node = ("bin", self.take()[1], node, self.product())
        return node

    def product(self):
        node = self.unary()
        while self.peek("*") or self.peek("/"):
            node = ("bin", self.take()[1], node, self.unary())
        return node

    def unary(self):
        if self.peek("-") or self.peek("!"):
            return ("un", self.take()[1], self.unary())
        return self.primary()

    def primary(self):
        kind, value = self.take()
        if kind == "num":
            return ("num", value)
        if value == "(":
            node = self.expr()
            self.take(")")
            return node
        if kind == "id" and self.peek("("):
            self.take("(")
            args = [self.expr()]
            while self.peek(","):
                self.take()
                args.append(self.expr())
            self.take(")")
            if value not in FUNCS and value not in ("select", "isnan"):
                raise FormulaError(f"{self.where}: unknown function {value}")
            return ("call", value, args)
        if kind == "id" and value in self.names:
            return ("var", value)
        raise FormulaError(f"{self.where}: unknown name '{value}'")


def is_bool(node):
    if node[0] == "bin":
        return node[1] in COMPARE or node[1] in ("&&", "||")
    if node[0] == "un":
        return node[1] == "!"
    return node[0] == "call" and node[1] == "isnan"


def calls(node):
    if node[0] == "call":
        yield node[1]
        for a in node[2]:
            yield from calls(a)
    elif node[0] == "bin":
        yield from calls(node[2])
        yield from calls(node[3])
    elif node[0] == "un":
        yield from calls(node[2])


# ---- printing, one class per target language ----

class Printer:
    """C-like printing; subclasses change names, literals and select."""
    fn_key = None

    def __init__(self, params=None):
        self.params = params or {}

    def number(self, text):
        return text

    def var(self, name):
        return self.params.get(name, name)

    def func(self, name, args):
        spelled = FUNCS[name].get(self.fn_key) or FUNCS[name].get("f")
        return spelled.format(*args) if "{" in spelled else f"{spelled}({', '.join(args)})"

    def isnan(self, arg):
        return f"isnan({arg})"

    def select(self, cond, a, b):
        return f"({cond} ? {a} : {b})"

    def binary(self, op, a, b, node):
        return f"({a} {op} {b})"

    def unary(self, op, a):
        return f"{op}{a}"

    def emit(self, node):
        kind = node[0]
        if kind == "num":
            return self.number(node[1])
        if kind == "var":
            return self.var(node[1])
        if kind == "un":
            return self.unary(node[1], self.emit(node[2]))
        if kind == "bin":
            return self.binary(node[1], self.emit(node[2]), self.emit(node[3]), node)
        name, args = node[1], node[2]
        if name == "select":
            return self.select(*(self.emit(a) for a in args))
        if name == "isnan":
            return self.isnan(self.emit(args[0]))
        return self.func(name, [self.emit(a) for a in args])

    def top(self, text):
        return text[1:-1] if text.startswith("(") and text.endswith(")") and balanced(text[1:-1]) else text


def balanced(text):
    depth = 0
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if depth < 0:
            return False
    return depth == 0


def float_literal(text):
    return text if any(c in text for c in ".eE") else text + ".0"


class CFloat(Printer):
    fn_key = "f"

    def number(self, text):
        return float_literal(text) + "f"


class CDouble(Printer):
    fn_key = "d"

    def number(self, text):
        return float_literal(text)


class WrappingInt(Printer):
    """Integer arithmetic that wraps: + - * through the unsigned type."""

    def __init__(self, signed, unsigned, fn_key):
        super().__init__()
        self.signed, self.unsigned, self.fn_key = signed, unsigned, fn_key

    def binary(self, op, a, b, node):
        if op in "+-*":
            return f"({self.signed})(({self.unsigned}){a} {op} ({self.unsigned}){b})"
        return f"({a} {op} {b})"


C_INT = WrappingInt("int64_t", "uint64_t", "i")      # the CPU reference's int64
CL_INT = WrappingInt("long", "ulong", "cl")          # OpenCL C's (and CUDA's, HIP's) long


class OpenCL(Printer):
    fn_key = "cl"

    def number(self, text):
        return f"(C){float_literal(text)}"


class WGSL(Printer):
    fn_key = "wgsl"

    def number(self, text):
        return float_literal(text)

    def isnan(self, arg):
        return f"is_nan({arg})"

    def select(self, cond, a, b):
        return f"select({b}, {a}, {cond})"


class WGSLInt(WGSL):
    def number(self, text):
        return text


class Simd(Printer):
    """GCC vector extensions: values are vf, conditions vi masks."""
    fn_key = "simd"

    def number(self, text):
        return f"splat({float_literal(text)}f)"

    def isnan(self, arg):
        return f"({arg} != {arg})"

    def func(self, name, args):
        return f"{FUNCS[name]['simd']}({', '.join(args)})"   # vector forms are plain functions

    def select(self, cond, a, b):
        return f"select({self.top(cond)}, {self.top(a)}, {self.top(b)})"

    def binary(self, op, a, b, node):
        op = {"&&": "&", "||": "|"}.get(op, op)
        return f"({a} {op} {b})"

    def unary(self, op, a):
        return f"~{a}" if op == "!" else f"-{a}"


# ---- the table ----

class Formula:
    def __init__(self, kind, name, flags, lets, result, int_form, line):
        self.kind, self.name, self.flags, self.line = kind, name, flags, line
        self.lets, self.result, self.int_form = lets, result, int_form
        self.enum = name.upper()

    def nodes(self):
        return [n for _, n in self.lets] + [self.result]

    def uses(self, name):
        return any(name in calls(n) for n in self.nodes())

    def simd_ok(self):
        return all(FUNCS.get(f, {}).get("simd") or f in ("select", "isnan") for n in self.nodes() for f in calls(n))

    def simd_approx(self):
        return any(FUNCS.get(f, {}).get("approx") for n in self.nodes() for f in calls(n))

    def params(self):
        used = set()

        def walk(node):
            if node[0] == "var" and node[1] in PARAMS:
                used.add(node[1])
            for child in node[2:] if node[0] in ("bin", "un") else node[2] if node[0] == "call" else []:
                walk(child)
        for n in self.nodes():
            walk(n)
        return used


LINE = re.compile(r"^(unary|binary)\s+([a-z_][a-z0-9_]*)\s*(?:\[([a-z0-9, ]*)\])?\s*:\s*(.+)$")


def parse_table(path):
    formulas = []
    with open(path, encoding="utf-8") as f:
        for number, raw in enumerate(f, 1):
            text = raw.split("#", 1)[0].strip()
            if not text:
                continue
            where = f"{path}:{number}"
            m = LINE.match(text)
            if not m:
                raise FormulaError(f"{where}: expected 'unary|binary NAME [flags]: formula'")
            kind, name, flags, body = m.group(1), m.group(2), m.group(3) or "", m.group(4)
            flags = {x.strip() for x in flags.split(",") if x.strip()}
            for flag in flags - {"f32", "own", "int"}:
                raise FormulaError(f"{where}: unknown flag {flag}")
            if any(f.name == name for f in formulas):
                raise FormulaError(f"{where}: {name} has a formula already")
            names = ("x",) + PARAMS if kind == "unary" else ("x", "y")
            float_text, _, int_text = body.partition("| int:")
            if int_text and kind == "unary":
                raise FormulaError(f"{where}: only binary ops have an int form")
            if "int" in flags:
                # integers only: the op's row accepts no float dtype, so its
                # float bodies are never run; they return 0
                if float_text.strip() or not int_text:
                    raise FormulaError(f"{where}: an [int] op has only its int form ('| int: ...')")
                float_text = "0"
            lets, result = Parser(tokenize(float_text, where), names, where).program()
            int_form = Parser(tokenize(int_text, where), names, where).program() if int_text else None
            if is_bool(result):
                raise FormulaError(f"{where}: a formula's result is a number, not a condition")
            formulas.append(Formula(kind, name, flags, lets, result, int_form, number))
    return formulas


# ---- the generated files ----

HEADER = "generated by tools/gen_formulas.py from src/ops/formulas.txt: edit that file, not this one"


def body(printer, lets, result, decl):
    """Statements for the lets, then `return result;` (decl(name, node) types a let)."""
    lines = [f"{decl(name, node)} {name} = {printer.top(printer.emit(node))};" for name, node in lets]
    lines.append(f"return {printer.top(printer.emit(result))};")
    return " ".join(lines)


def formulas_h(table):
    unary = [f for f in table if f.kind == "unary"]
    binary = [f for f in table if f.kind == "binary"]

    def lst(name, items, doc):
        rows = " ".join(f"X({f.enum}, {f.name})" for f in items)
        return f"/* {doc} */\n#define {name}(X) {rows}\n"
    out = [f"/* {HEADER} */\n#ifndef TF_FORMULAS_H\n#define TF_FORMULAS_H\n\n",
           lst("TF_FORMULA_UNARY", unary, "every unary formula: X(ENUM, name)"),
           lst("TF_FORMULA_BINARY", binary, "every binary formula"),
           lst("TF_FORMULA_BINARY_INT", [f for f in binary if f.int_form], "binary formulas with an int form"),
           lst("TF_FORMULA_BINARY_FLOAT_ONLY", [f for f in binary if not f.int_form], "binary formulas on floats only"),
           lst("TF_FORMULA_UNARY_API", [f for f in unary if "own" not in f.flags and "f32" not in f.flags],
               "tf_NAME(x, out) made from the formula"),
           lst("TF_FORMULA_UNARY_API_F32", [f for f in unary if "own" not in f.flags and "f32" in f.flags],
               "the same, run in f32 under mixed precision"),
           lst("TF_FORMULA_BINARY_API", [f for f in binary if "own" not in f.flags and "f32" not in f.flags],
               "tf_NAME(a, b, out) made from the formula"),
           lst("TF_FORMULA_BINARY_API_F32", [f for f in binary if "own" not in f.flags and "f32" in f.flags],
               "the same, run in f32 under mixed precision"),
           lst("TF_FORMULA_SIMD_UNARY", [f for f in unary if f.simd_ok()], "unary formulas with a SIMD body"),
           lst("TF_FORMULA_SIMD_BINARY", [f for f in binary if f.simd_ok()], "binary formulas with a SIMD body"),
           "\n#endif\n"]
    return "".join(out)


def formulas_ref(table):
    params = {"alpha": "(CT)p->alpha", "lo": "(CT)p->min_value", "hi": "(CT)p->max_value"}
    out = [f"/* {HEADER}.\n * The CPU reference's scalar functions, included by cpu_ref.c. */\n"]
    for f in table:
        out.append(f"\n/* {f.name} (formulas.txt:{f.line}) */\n")
        for suffix, ct, printer in (("f", "float", CFloat), ("d", "double", CDouble)):
            pr = printer({k: v.replace("CT", ct) for k, v in params.items()})
            decl = lambda name, node, ct=ct: "bool" if is_bool(node) else ct
            if f.kind == "unary":
                used = f.params()
                void = "" if used else " (void)p;"
                out.append(f"static {ct} u_{f.name}_{suffix}({ct} x, const tf_op_params *p) {{{void} "
                           f"{body(pr, f.lets, f.result, decl)} }}\n")
            else:
                out.append(f"static {ct} b_{f.name}_{suffix}({ct} x, {ct} y) {{ {body(pr, f.lets, f.result, decl)} }}\n")
        if f.int_form:
            decl = lambda name, node: "bool" if is_bool(node) else "int64_t"
            out.append(f"static int64_t b_{f.name}_i(int64_t x, int64_t y) {{ {body(C_INT, *f.int_form, decl)} }}\n")
    return "".join(out)


def formulas_simd(table):
    out = [f"/* {HEADER}.\n * The SIMD bodies (vf, vi masks) and their scalar twins for tails, included by\n"
           f" * fast_kernels.inc once per ISA. A body that calls an approximation (vexp_full, verfc)\n"
           f" * keeps NaN explicitly: the approximation would not. */\n"]
    vparams = {"alpha": "alpha", "lo": "lo", "hi": "hi"}
    for f in table:
        if not f.simd_ok():
            continue
        vdecl = lambda name, node: "vi" if is_bool(node) else "vf"
        sdecl = lambda name, node: "bool" if is_bool(node) else "float"
        vbody = body(Simd(vparams), f.lets, f.result, vdecl)
        if f.simd_approx():
            vbody = vbody.replace("return ", "vf r = ", 1).rstrip() + " return select(x != x, x, r);"
        if f.kind == "unary":
            out.append(f"static inline vf uv_{f.name}(vf x, vf alpha, vf lo, vf hi) {{ (void)alpha; (void)lo; (void)hi; "
                       f"{vbody} }}\n")
            out.append(f"static inline float us_{f.name}(float x, float alpha, float lo, float hi) {{ (void)alpha; "
                       f"(void)lo; (void)hi; {body(CFloat(vparams), f.lets, f.result, sdecl)} }}\n")
        else:
            out.append(f"static inline vf bv_{f.name}(vf x, vf y) {{ {vbody} }}\n")
            out.append(f"static inline float bs_{f.name}(float x, float y) {{ "
                       f"{body(CFloat(), f.lets, f.result, sdecl)} }}\n")
    return "".join(out)


def switch(cases, indent, open_case, close_case, default):
    lines = [f"{indent}{open_case(f)}{text}{close_case}" for f, text in cases]
    lines.append(f"{indent}{default}")
    return "\n".join(lines)


def opencl_parts(table):
    floats = [f for f in table if f.kind == "binary"]
    decl = lambda name, node: "bool" if is_bool(node) else "C"
    idecl = lambda name, node: "bool" if is_bool(node) else "long"
    binary = ["#if IS_FLOAT", "inline C apply(int op, C x, C y) {", "    switch (op) {",
              switch([(f, body(OpenCL(), f.lets, f.result, decl)) for f in floats], "    ",
                     lambda f: f"case TF_OP_{f.enum}: {{ ", " }", "default: return (C)0;"),
              "    }", "}", "#else", "inline C apply(int op, C x, C y) {", "    switch (op) {",
              switch([(f, body(CL_INT, *f.int_form, idecl)) for f in floats if f.int_form], "    ",
                     lambda f: f"case TF_OP_{f.enum}: {{ ", " }", "default: return 0;"),
              "    }", "}", "#endif"]
    unary = ["inline C apply_unary(int op, C x, C alpha, C lo, C hi) {", "    switch (op) {",
             switch([(f, body(OpenCL(), f.lets, f.result, decl)) for f in table if f.kind == "unary"], "    ",
                    lambda f: f"case TF_OP_{f.enum}: {{ ", " }", "default: return x;"),
             "    }", "}"]
    return {"binary": "\n".join(binary), "unary": "\n".join(unary)}


def wgsl_parts(table):
    decl = lambda name, node: "let"
    floats = [f for f in table if f.kind == "binary"]
    case = lambda f: f"case TF_OP_{f.enum}: {{ "
    binary_f = ["fn apply_f(op: i32, x: f32, y: f32) -> f32 {", "    switch op {",
                switch([(f, body(WGSL(), f.lets, f.result, decl)) for f in floats], "        ", case, " }",
                       "default: { return 0.0; }"), "    }", "}"]
    binary_i = ["fn apply_i(op: i32, x: i32, y: i32) -> i32 {", "    switch op {",
                switch([(f, body(WGSLInt(), *f.int_form, decl)) for f in floats if f.int_form], "        ", case, " }",
                       "default: { return 0; }"), "    }", "}"]
    params = {"alpha": "A.alpha", "lo": "A.lo", "hi": "A.hi"}
    unary = ["fn apply_unary(op: i32, x: f32) -> f32 {", "    switch op {",
             switch([(f, body(WGSL(params), f.lets, f.result, decl)) for f in table if f.kind == "unary"], "        ",
                    case, " }", "default: { return x; }"), "    }", "}"]
    return {"binary_f": "\n".join(binary_f), "binary_i": "\n".join(binary_i), "unary": "\n".join(unary)}


def flat_entry(m):
    """WGSL's usual 1-D entry point: invocations stride over A.gx items."""
    name = m.group(1)
    return ("@compute @workgroup_size(WG)\n"
            f"fn {name}(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{\n"
            f"    for (var i = flat_id(gid, nwg); i < A.gx; i += flat_stride(nwg)) {{ {name}_item(i); }}\n"
            "}")


def fill_template(path, parts, comment):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen = set()

    def replace(m):
        name = m.group(1)
        if name not in parts:
            raise FormulaError(f"{path}: no generated part '{name}'")
        seen.add(name)
        return f"{comment} ---- {HEADER} ({name}) ----\n{parts[name]}\n{comment} ---- end of the generated part ----"
    text = re.sub(r"^[ \t]*//@formulas (\w+)[ \t]*$", replace, text, flags=re.M)
    text = re.sub(r"^//@flat (\w+)[ \t]*$", flat_entry, text, flags=re.M)
    missing = set(parts) - seen
    if missing:
        raise FormulaError(f"{path}: no //@formulas line for {', '.join(sorted(missing))}")
    return f"{comment} {HEADER} and {os.path.basename(path)}\n" + text


def write_if_changed(path, text):
    """Write text; an unchanged file keeps its contents but is touched (the
    build's rule is then up to date and does not run again)."""
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                os.utime(path)
                return
    except FileNotFoundError:
        pass
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main(argv):
    args, templates = [], {}
    it = iter(argv)
    for a in it:
        if a in ("--cl", "--wgsl"):
            templates[a[2:]] = next(it)
        else:
            args.append(a)
    if len(args) != 2:
        sys.stderr.write(__doc__)
        return 2
    try:
        table = parse_table(args[0])
        out = args[1]
        files = {"formulas.h": formulas_h(table), "formulas_ref.inc": formulas_ref(table),
                 "formulas_simd.inc": formulas_simd(table)}
        if "cl" in templates:
            files["portable_kernels.cl"] = fill_template(templates["cl"], opencl_parts(table), "//")
        if "wgsl" in templates:
            files["webgpu_kernels.wgsl"] = fill_template(templates["wgsl"], wgsl_parts(table), "//")
        os.makedirs(out, exist_ok=True)          # every text made before any is written: no half a set
        for name, text in files.items():
            write_if_changed(os.path.join(out, name), text)
    except FormulaError as e:
        sys.stderr.write(f"gen_formulas: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
