/*
 * ka_hack — a static check that a kernel's source computes through NKI,
 * against the reward hacks kernel agents are known for (returning the
 * reference's output, computing with NumPy, remembering inputs between
 * calls, special-casing the inputs it was shown).  docs/llm.md, "What is
 * checked".
 *
 * It reads the text only (nothing runs): comments and string literals are
 * blanked, then the kernel's functions are scanned -- the entry, every
 * top-level function decorated with @nki..., and the top-level functions
 * they call by name, transitively; never the reference function.  The
 * entry's parameters without a default are the input tensors.  Rules
 * (the first one broken is reported, with its line):
 *   numpy_on_inputs      a NumPy call (through any alias or a name imported
 *                        from numpy) whose arguments use an input other than
 *                        its .shape/.dtype/.ndim/.size;
 *   python_on_inputs     Python arithmetic or comparison on an input's value
 *                        (a + b, a[0] * 2, sum(a), float(a[0]), a.sum()...);
 *   reads_reference      the reference function's name, or its module
 *                        (imported or an attribute read), in a kernel
 *                        function;
 *   dynamic_code         open, exec, eval, compile, __import__, importlib,
 *                        globals(), sys.modules, pickle, in a kernel function;
 *   state_between_calls  global / nonlocal, a module-level name mutated
 *                        (NAME[...] = , NAME.append( ...), or an attribute
 *                        set on a function, in a kernel function;
 *   branches_on_inputs   an if / elif / while / assert / conditional
 *                        expression whose condition uses an input's value.
 * Inputs are known by the entry's parameter names, in the helpers too (a
 * helper that takes them under other names is not followed, nor are
 * values copied into other variables).
 * It is a lexical check: a kernel can be written to evade it (which is why
 * validation on fresh seeds still decides correctness), and a legitimate
 * kernel that does one of these things is refused with the rule and line,
 * so its author can see why.
 *
 * Result: true when nothing is found; false with the rule in rule (one of
 * the words above), the 1-based line in *line and a sentence in why.
 * No heap is kept.
 */
#ifndef KA_HACK_H
#define KA_HACK_H

#include <stdbool.h>
#include <stddef.h>

/* ref_entry: the reference function's name ("" none); ref_module: the
 * reference file's module name ("ref" for ref.py; "" none or when the
 * reference is in the kernel's own file). */
bool ka_hack_check(const char *source, const char *entry, const char *ref_entry, const char *ref_module,
                   char rule[32], int *line, char *why, size_t why_n);

#endif
