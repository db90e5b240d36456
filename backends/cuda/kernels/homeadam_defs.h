// homeadam_defs.h: generated from homeadam-cuda's src/kernels.rs (`kernels::defs_header`),
// the one source of these values; do not edit. Builds through Rust (NVRTC, the g++ parity
// test) get them from kernels.rs itself; this copy serves a build of one file alone.
#define HA_METADATA 1
#define HA_CHUNK 16384
#define HA_BOUND_CHUNK 256
#define HA_NESTEROV 1u
#define HA_WEIGHT_DECOUPLE 2u
#define HA_STOCHASTIC 4u
#define HA_RHO_ACTIVE 8u
#define HA_BOUND 16u
#define HA_SWITCH_ELEMENT 0u
#define HA_SWITCH_GLOBAL 1u
#define HA_SWITCH_LAYER 2u
#define HA_SWITCH_SRF 3u
#define HA_SWITCH_SHIFT 8
#define HA_SCALARS_FIELDS float lr; float one_minus_beta1; float one_minus_beta2; float decay; float bc2; float sqrt_bc2; float lr_over_bc1; float momentum; float one_minus_dampening; float inv_grad_scale; float lr2_over_bc1; float rect_lr; float swats_step; ha_u32 first_step; ha_u32 mi_phase; ha_u32 rect_mode; float home_lr_over_bc1; float beta1; float beta2; float eps; float weight_decay; float tau; float kappa;
#define HA_SCALARS_OFFSETS(X) X(lr, 0) X(one_minus_beta1, 4) X(one_minus_beta2, 8) X(decay, 12) X(bc2, 16) X(sqrt_bc2, 20) X(lr_over_bc1, 24) X(momentum, 28) X(one_minus_dampening, 32) X(inv_grad_scale, 36) X(lr2_over_bc1, 40) X(rect_lr, 44) X(swats_step, 48) X(first_step, 52) X(mi_phase, 56) X(rect_mode, 60) X(home_lr_over_bc1, 64) X(beta1, 68) X(beta2, 72) X(eps, 76) X(weight_decay, 80) X(tau, 84) X(kappa, 88)
#define HA_BUCKETS 128u
#define HA_SIZE_SCALARS 92
#define HA_SIZE_TENSOR 64
#define HA_SIZE_STATUS 48
#define HA_SIZE_Q8 260
#define HA_EXACT_LIMBS 18
#define HA_EXACT_WORDS 19
#define HA_EXACT_DIGIT_BITS 32
#define HA_EXACT_LSB_EXP (-298)
#define HA_EXACT_NAN 1ull
#define HA_EXACT_POS_INF 2ull
#define HA_EXACT_NEG_INF 4ull
#define HA_Q8_BLOCK 256
#define HA_Q8_SALT 0x7138000000000000ull
#define HA_Q8_HASH_MUL0 0x7feb352du
#define HA_Q8_HASH_MUL1 0x846ca68bu
#define HA_Q8_UNSIGNED 0x0u, 0x34e411f0u, 0x34f1a1bfu, 0x35000000u, 0x35079c7du, 0x350facd6u, 0x351837f0u, 0x35214518u, 0x352adc08u, 0x353504f3u, 0x353fc887u, 0x354b2ff5u, 0x355744fdu, 0x356411f0u, 0x3571a1bfu, 0x35800000u, 0x35879c7du, 0x358facd6u, 0x359837f0u, 0x35a14518u, 0x35aadc08u, 0x35b504f3u, 0x35bfc887u, 0x35cb2ff5u, 0x35d744fdu, 0x35e411f0u, 0x35f1a1bfu, 0x36000000u, 0x36079c7du, 0x360facd6u, 0x361837f0u, 0x36214518u, 0x362adc08u, 0x363504f3u, 0x363fc887u, 0x364b2ff5u, 0x365744fdu, 0x366411f0u, 0x3671a1bfu, 0x36800000u, 0x36879c7du, 0x368facd6u, 0x369837f0u, 0x36a14518u, 0x36aadc08u, 0x36b504f3u, 0x36bfc887u, 0x36cb2ff5u, 0x36d744fdu, 0x36e411f0u, 0x36f1a1bfu, 0x37000000u, 0x37079c7du, 0x370facd6u, 0x371837f0u, 0x37214518u, 0x372adc08u, 0x373504f3u, 0x373fc887u, 0x374b2ff5u, 0x375744fdu, 0x376411f0u, 0x3771a1bfu, 0x37800000u, 0x37879c7du, 0x378facd6u, 0x379837f0u, 0x37a14518u, 0x37aadc08u, 0x37b504f3u, 0x37bfc887u, 0x37cb2ff5u, 0x37d744fdu, 0x37e411f0u, 0x37f1a1bfu, 0x38000000u, 0x38079c7du, 0x380facd6u, 0x381837f0u, 0x38214518u, 0x382adc08u, 0x383504f3u, 0x383fc887u, 0x384b2ff5u, 0x385744fdu, 0x386411f0u, 0x3871a1bfu, 0x38800000u, 0x38879c7du, 0x388facd6u, 0x389837f0u, 0x38a14518u, 0x38aadc08u, 0x38b504f3u, 0x38bfc887u, 0x38cb2ff5u, 0x38d744fdu, 0x38e411f0u, 0x38f1a1bfu, 0x39000000u, 0x39079c7du, 0x390facd6u, 0x391837f0u, 0x39214518u, 0x392adc08u, 0x393504f3u, 0x393fc887u, 0x394b2ff5u, 0x395744fdu, 0x396411f0u, 0x3971a1bfu, 0x39800000u, 0x39879c7du, 0x398facd6u, 0x399837f0u, 0x39a14518u, 0x39aadc08u, 0x39b504f3u, 0x39bfc887u, 0x39cb2ff5u, 0x39d744fdu, 0x39e411f0u, 0x39f1a1bfu, 0x3a000000u, 0x3a079c7du, 0x3a0facd6u, 0x3a1837f0u, 0x3a214518u, 0x3a2adc08u, 0x3a3504f3u, 0x3a3fc887u, 0x3a4b2ff5u, 0x3a5744fdu, 0x3a6411f0u, 0x3a71a1bfu, 0x3a800000u, 0x3a879c7du, 0x3a8facd6u, 0x3a9837f0u, 0x3aa14518u, 0x3aaadc08u, 0x3ab504f3u, 0x3abfc887u, 0x3acb2ff5u, 0x3ad744fdu, 0x3ae411f0u, 0x3af1a1bfu, 0x3b000000u, 0x3b079c7du, 0x3b0facd6u, 0x3b1837f0u, 0x3b214518u, 0x3b2adc08u, 0x3b3504f3u, 0x3b3fc887u, 0x3b4b2ff5u, 0x3b5744fdu, 0x3b6411f0u, 0x3b71a1bfu, 0x3b800000u, 0x3b879c7du, 0x3b8facd6u, 0x3b9837f0u, 0x3ba14518u, 0x3baadc08u, 0x3bb504f3u, 0x3bbfc887u, 0x3bcb2ff5u, 0x3bd744fdu, 0x3be411f0u, 0x3bf1a1bfu, 0x3c000000u, 0x3c079c7du, 0x3c0facd6u, 0x3c1837f0u, 0x3c214518u, 0x3c2adc08u, 0x3c3504f3u, 0x3c3fc887u, 0x3c4b2ff5u, 0x3c5744fdu, 0x3c6411f0u, 0x3c71a1bfu, 0x3c800000u, 0x3c879c7du, 0x3c8facd6u, 0x3c9837f0u, 0x3ca14518u, 0x3caadc08u, 0x3cb504f3u, 0x3cbfc887u, 0x3ccb2ff5u, 0x3cd744fdu, 0x3ce411f0u, 0x3cf1a1bfu, 0x3d000000u, 0x3d079c7du, 0x3d0facd6u, 0x3d1837f0u, 0x3d214518u, 0x3d2adc08u, 0x3d3504f3u, 0x3d3fc887u, 0x3d4b2ff5u, 0x3d5744fdu, 0x3d6411f0u, 0x3d71a1bfu, 0x3d800000u, 0x3d879c7du, 0x3d8facd6u, 0x3d9837f0u, 0x3da14518u, 0x3daadc08u, 0x3db504f3u, 0x3dbfc887u, 0x3dcb2ff5u, 0x3dd744fdu, 0x3de411f0u, 0x3df1a1bfu, 0x3e000000u, 0x3e079c7du, 0x3e0facd6u, 0x3e1837f0u, 0x3e214518u, 0x3e2adc08u, 0x3e3504f3u, 0x3e3fc887u, 0x3e4b2ff5u, 0x3e5744fdu, 0x3e6411f0u, 0x3e71a1bfu, 0x3e800000u, 0x3e879c7du, 0x3e8facd6u, 0x3e9837f0u, 0x3ea14518u, 0x3eaadc08u, 0x3eb504f3u, 0x3ebfc887u, 0x3ecb2ff5u, 0x3ed744fdu, 0x3ee411f0u, 0x3ef1a1bfu, 0x3f000000u, 0x3f079c7du, 0x3f0facd6u, 0x3f1837f0u, 0x3f214518u, 0x3f2adc08u, 0x3f3504f3u, 0x3f3fc887u, 0x3f4b2ff5u, 0x3f5744fdu, 0x3f6411f0u, 0x3f71a1bfu, 0x3f800000u
#define HA_Q8_SIGNED 0x0u, 0x379837f0u, 0x37a5fed7u, 0x37b504f3u, 0x37c5672au, 0x37d744fdu, 0x37eac0c7u, 0x38000000u, 0x380b95c2u, 0x381837f0u, 0x3825fed7u, 0x383504f3u, 0x3845672au, 0x385744fdu, 0x386ac0c7u, 0x38800000u, 0x388b95c2u, 0x389837f0u, 0x38a5fed7u, 0x38b504f3u, 0x38c5672au, 0x38d744fdu, 0x38eac0c7u, 0x39000000u, 0x390b95c2u, 0x391837f0u, 0x3925fed7u, 0x393504f3u, 0x3945672au, 0x395744fdu, 0x396ac0c7u, 0x39800000u, 0x398b95c2u, 0x399837f0u, 0x39a5fed7u, 0x39b504f3u, 0x39c5672au, 0x39d744fdu, 0x39eac0c7u, 0x3a000000u, 0x3a0b95c2u, 0x3a1837f0u, 0x3a25fed7u, 0x3a3504f3u, 0x3a45672au, 0x3a5744fdu, 0x3a6ac0c7u, 0x3a800000u, 0x3a8b95c2u, 0x3a9837f0u, 0x3aa5fed7u, 0x3ab504f3u, 0x3ac5672au, 0x3ad744fdu, 0x3aeac0c7u, 0x3b000000u, 0x3b0b95c2u, 0x3b1837f0u, 0x3b25fed7u, 0x3b3504f3u, 0x3b45672au, 0x3b5744fdu, 0x3b6ac0c7u, 0x3b800000u, 0x3b8b95c2u, 0x3b9837f0u, 0x3ba5fed7u, 0x3bb504f3u, 0x3bc5672au, 0x3bd744fdu, 0x3beac0c7u, 0x3c000000u, 0x3c0b95c2u, 0x3c1837f0u, 0x3c25fed7u, 0x3c3504f3u, 0x3c45672au, 0x3c5744fdu, 0x3c6ac0c7u, 0x3c800000u, 0x3c8b95c2u, 0x3c9837f0u, 0x3ca5fed7u, 0x3cb504f3u, 0x3cc5672au, 0x3cd744fdu, 0x3ceac0c7u, 0x3d000000u, 0x3d0b95c2u, 0x3d1837f0u, 0x3d25fed7u, 0x3d3504f3u, 0x3d45672au, 0x3d5744fdu, 0x3d6ac0c7u, 0x3d800000u, 0x3d8b95c2u, 0x3d9837f0u, 0x3da5fed7u, 0x3db504f3u, 0x3dc5672au, 0x3dd744fdu, 0x3deac0c7u, 0x3e000000u, 0x3e0b95c2u, 0x3e1837f0u, 0x3e25fed7u, 0x3e3504f3u, 0x3e45672au, 0x3e5744fdu, 0x3e6ac0c7u, 0x3e800000u, 0x3e8b95c2u, 0x3e9837f0u, 0x3ea5fed7u, 0x3eb504f3u, 0x3ec5672au, 0x3ed744fdu, 0x3eeac0c7u, 0x3f000000u, 0x3f0b95c2u, 0x3f1837f0u, 0x3f25fed7u, 0x3f3504f3u, 0x3f45672au, 0x3f5744fdu, 0x3f6ac0c7u, 0x3f800000u
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
#define HA_RULE_LION 10
#define HA_MAX_SLOTS 3
#define HA_RULE_KERNELS(X) X(sgd, HA_RULE_SGD, 0, -1, 0u, ha_sgd<false>) X(sgdm, HA_RULE_SGDM, 1, -1, 0u, ha_sgd<true>) X(adam, HA_RULE_ADAM, 2, 1, 2u, ha_adam<false>) X(adamw, HA_RULE_ADAMW, 2, 1, 2u, ha_adam<true>) X(homeadam, HA_RULE_HOMEADAM, 2, 1, 2u, ha_home) X(adabelief, HA_RULE_ADABELIEF, 2, -1, 2u, ha_adabelief<false>) X(adabelief_amsgrad, HA_RULE_ADABELIEF_AMSGRAD, 3, -1, 6u, ha_adabelief<true>) X(swats_adam, HA_RULE_SWATS_ADAM, 3, 1, 2u, ha_swats_adam) X(swats_sgd, HA_RULE_SWATS_SGD, 3, -1, 2u, ha_swats_sgd) X(miadam, HA_RULE_MIADAM, 3, 1, 2u, ha_miadam) X(lion, HA_RULE_LION, 1, -1, 0u, ha_lion)
#define HA_STORAGE_P(X, ...) X(float, f32, __VA_ARGS__) X(ha_f16, f16, __VA_ARGS__) X(ha_bf16, bf16, __VA_ARGS__)
#define HA_STORAGE_G(X, ...) X(float, f32, __VA_ARGS__) X(ha_f16, f16, __VA_ARGS__) X(ha_bf16, bf16, __VA_ARGS__)
#define HA_STORAGE_S(X, ...) X(float, f32, __VA_ARGS__) X(ha_f16, f16, __VA_ARGS__) X(ha_bf16, bf16, __VA_ARGS__) X(HaQ8Block, q8, __VA_ARGS__)
#define HA_STORAGE_E(X, ...) X(float, f32, __VA_ARGS__) X(ha_f16, f16, __VA_ARGS__) X(ha_bf16, bf16, __VA_ARGS__)
