/*
 * sim_isa — the NeuronCore instruction set as kforge's simulator models it,
 * declared once.
 *
 * SIM_ISA_MAP(XX) lists every opcode with its default engine and its cost
 * class.  The functional simulator (sim/ core, the `nki` Python face) emits
 * these opcodes into the instruction record (sim_record.h); the timing model
 * maps the cost class to a cost rule from the target file; the profiler
 * and the docs print the names.  Adding an instruction is adding a row here
 * and its numerics; nothing else switches on raw numbers.
 *
 * Engines follow the profiler's names: tensor (PE), vector (DVE),
 * scalar (ACT), gpsimd (POOL), sync (SP), and the DMA queues.
 */
#ifndef SIM_ISA_H
#define SIM_ISA_H

/* id, name (profile JSON), title (as the hardware guides spell it) */
#define SIM_ENGINE_MAP(XX)            \
    XX(TENSOR, "tensor", "TensorE")   \
    XX(VECTOR, "vector", "VectorE")   \
    XX(SCALAR, "scalar", "ScalarE")   \
    XX(GPSIMD, "gpsimd", "GpSimd")    \
    XX(SYNC,   "sync",   "SyncE")     \
    XX(DMA,    "dma",    "DMA")

typedef enum sim_engine {
#define XX(id, name, title) SIM_ENG_##id,
    SIM_ENGINE_MAP(XX)
#undef XX
    SIM_ENG__COUNT
} sim_engine;

/* Cost classes: how the timing model prices an instruction.
 *   MATMUL      LoadStationary + MultiplyMoving, issue ~max(N,64) cycles
 *   TRANSPOSE   PE transpose (matmul against identity)
 *   STREAM1     one input streamed through an engine, ~N cycles + overhead
 *   STREAM2     two inputs (tensor_tensor), ~2N cycles + overhead
 *   REDUCE      stream with a free-axis reduction
 *   SLOWDVE     ops VectorE does at reduced rate (reciprocal: 8N)
 *   DMA         a transfer on a DMA queue (fixed cost + bytes / bandwidth)
 *   CONTROL     bookkeeping with a fixed cost (barrier, register ops)      */
#define SIM_COST_MAP(XX) \
    XX(MATMUL)           \
    XX(TRANSPOSE)        \
    XX(STREAM1)          \
    XX(STREAM2)          \
    XX(REDUCE)           \
    XX(SLOWDVE)          \
    XX(DMA)              \
    XX(CONTROL)

typedef enum sim_cost {
#define XX(id) SIM_COST_##id,
    SIM_COST_MAP(XX)
#undef XX
    SIM_COST__COUNT
} sim_cost;

/*  opcode                 default engine  cost class  profiler name */
#define SIM_ISA_MAP(XX)                                                   \
    XX(DMA_COPY,           DMA,     DMA,       "DmaCopy")                 \
    XX(DMA_TRANSPOSE,      DMA,     DMA,       "DmaTranspose")            \
    XX(MATMUL,             TENSOR,  MATMUL,    "MATMUL")                  \
    XX(PE_TRANSPOSE,       TENSOR,  TRANSPOSE, "TRANSPOSE")               \
    XX(TENSOR_COPY,        VECTOR,  STREAM1,   "TensorCopy")              \
    XX(MEMSET,             VECTOR,  STREAM1,   "Memset")                  \
    XX(IOTA,               GPSIMD,  STREAM1,   "Iota")                    \
    XX(TENSOR_TENSOR,      VECTOR,  STREAM2,   "TensorTensor")            \
    XX(TENSOR_SCALAR,      VECTOR,  STREAM1,   "TensorScalarPtr")         \
    XX(SCALAR_TENSOR_TENSOR, VECTOR, STREAM2,  "ScalarTensorTensor")      \
    XX(TENSOR_REDUCE,      VECTOR,  REDUCE,    "TensorReduce")            \
    XX(TENSOR_SCALAR_REDUCE, VECTOR, REDUCE,   "TensorScalarReduce")      \
    XX(ACTIVATION,         SCALAR,  STREAM1,   "Activation")              \
    XX(ACTIVATION_REDUCE,  SCALAR,  REDUCE,    "ActivationReduce")        \
    XX(RECIPROCAL,         VECTOR,  SLOWDVE,   "Reciprocal")              \
    XX(VE_TRANSPOSE,       VECTOR,  STREAM1,   "Transpose32")             \
    XX(AFFINE_SELECT,      GPSIMD,  STREAM1,   "AffineSelect")            \
    XX(TENSOR_TENSOR_SCAN, VECTOR,  STREAM2,   "TensorTensorScan")        \
    XX(BN_STATS,           VECTOR,  REDUCE,    "BatchNormStats")          \
    XX(BN_AGGR,            VECTOR,  REDUCE,    "BatchNormAggregate")      \
    XX(SELECT,             VECTOR,  STREAM2,   "Select")                  \
    XX(BARRIER,            SYNC,    CONTROL,   "Barrier")

typedef enum sim_opcode {
#define XX(id, eng, cost, pname) SIM_OP_##id,
    SIM_ISA_MAP(XX)
#undef XX
    SIM_OP__COUNT
} sim_opcode;

/* Tables generated from the maps (sim_isa.c). */
const char *sim_engine_name(sim_engine e);     /* "tensor" */
const char *sim_engine_title(sim_engine e);    /* "TensorE", for messages */
/* The engine named `name` ("tensor"), or SIM_ENG__COUNT for no engine. */
sim_engine sim_engine_by_name(const char *name);
const char *sim_opcode_name(sim_opcode op);    /* "MATMUL" (profiler name) */
sim_engine sim_opcode_engine(sim_opcode op);   /* default engine */
sim_cost sim_opcode_cost(sim_opcode op);

#endif
