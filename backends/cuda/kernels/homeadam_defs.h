// homeadam_defs.h: generated from homeadam-cuda's src/kernels.rs (`kernels::defs_header`),
// the one source of these values; do not edit. Builds through Rust (NVRTC, the g++ parity
// test) get them from kernels.rs itself; this copy serves a build of one file alone.
#define HA_METADATA 1
#define HA_CHUNK 16384
#define HA_NESTEROV 1u
#define HA_WEIGHT_DECOUPLE 2u
#define HA_STOCHASTIC 4u
#define HA_RHO_ACTIVE 8u
#define HA_SWITCH_ELEMENT 0u
#define HA_SWITCH_GLOBAL 1u
#define HA_SWITCH_LAYER 2u
#define HA_SWITCH_SRF 3u
#define HA_SWITCH_SHIFT 8
#define HA_BUCKETS 128u
#define HA_SIZE_SCALARS 96
#define HA_SIZE_TENSOR 56
#define HA_SIZE_STATUS 32
#define HA_EXACT_LIMBS 18
#define HA_EXACT_WORDS 19
#define HA_EXACT_DIGIT_BITS 32
#define HA_EXACT_LSB_EXP (-298)
#define HA_EXACT_NAN 1ull
#define HA_EXACT_POS_INF 2ull
#define HA_EXACT_NEG_INF 4ull
#define HA_RULE_SGD 0
#define HA_RULE_SGDM 1
#define HA_RULE_ADAM 2
#define HA_RULE_ADAMW 3
#define HA_RULE_HOMEADAM 4
#define HA_RULE_ADABELIEF 5
#define HA_RULE_ADABELIEF_AMSGRAD 6
#define HA_RULE_SWATS_ADAM 7
#define HA_RULE_SWATS_SGD 8
#define HA_RULE_MIADAM 9
#define HA_MAX_SLOTS 3
#define HA_RULE_KERNELS(X) X(sgd, HA_RULE_SGD, 0, -1) X(sgdm, HA_RULE_SGDM, 1, -1) X(adam, HA_RULE_ADAM, 2, 1) X(adamw, HA_RULE_ADAMW, 2, 1) X(homeadam, HA_RULE_HOMEADAM, 2, 1) X(adabelief, HA_RULE_ADABELIEF, 2, -1) X(adabelief_amsgrad, HA_RULE_ADABELIEF_AMSGRAD, 3, -1) X(swats_adam, HA_RULE_SWATS_ADAM, 3, 1) X(swats_sgd, HA_RULE_SWATS_SGD, 3, -1) X(miadam, HA_RULE_MIADAM, 3, 1)
#define HA_STORAGE_P(X, ...) X(float, f32, __VA_ARGS__) X(ha_f16, f16, __VA_ARGS__) X(ha_bf16, bf16, __VA_ARGS__)
#define HA_STORAGE_G(X, ...) X(float, f32, __VA_ARGS__) X(ha_f16, f16, __VA_ARGS__) X(ha_bf16, bf16, __VA_ARGS__)
#define HA_STORAGE_S(X, ...) X(float, f32, __VA_ARGS__) X(ha_f16, f16, __VA_ARGS__) X(ha_bf16, bf16, __VA_ARGS__)
