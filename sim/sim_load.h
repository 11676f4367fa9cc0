/*
 * sim_load — what sim_run needs to load real projects' kernel files: the
 * stand-ins for test-harness libraries (SIM_RUN_STUBBED) and the Python
 * values of JSON arguments.
 *
 * Stubs: a finder at the end of sys.meta_path (so an installed library
 * always wins) answers `import torch`, `import torch.nn.functional as F`,
 * `from torch_xla.core import xla_model` ... with stub modules while a run
 * has them on.  Reading an attribute of a stub gives a stub (one per dotted
 * name, so they hash and compare by identity); calling one, operating on it,
 * indexing, iterating, converting it or instantiating a class derived from
 * it raises SIM_E_UNSUPPORTED_API naming the dotted name, at the line of
 * the kernel (or its module) that used it.
 *
 * Internal to sim/ (needs the embedded interpreter: call after py_init).
 */
#ifndef SIM_LOAD_H
#define SIM_LOAD_H

#include <Python.h>
#include <stdbool.h>

/* Install the helpers once; -1 with a Python error set. */
int sim_load_init(void);
/* Turn the stubs on or off for the run that starts. */
int sim_load_stubs(bool on);
/* Turn them off and drop every stub module from sys.modules (end of a run). */
void sim_load_reset(void);
/* The Python value of a JSON text: arrays become tuples, objects dicts
 * whose keys also read as attributes.  New reference, or NULL with a
 * Python error naming what is wrong with the text. */
PyObject *sim_load_value(const char *json);

#endif
