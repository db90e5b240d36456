// instantiations.cu: every kernel of homeadam.cu, named {rule}_{p}_{g}_{s} (the runtime
// instantiates only the kernels a model needs; the compile check builds all of them).

HA_UPDATE_ALL(sgd, HA_RULE_SGD)
HA_UPDATE_ALL(sgdm, HA_RULE_SGDM)
HA_UPDATE_ALL(adam, HA_RULE_ADAM)
HA_UPDATE_ALL(adamw, HA_RULE_ADAMW)
HA_UPDATE_ALL(homeadam, HA_RULE_HOME)
HA_UPDATE_ALL(adabelief, HA_RULE_ADABELIEF)
HA_UPDATE_ALL(adabelief_amsgrad, HA_RULE_ADABELIEF_AMSGRAD)
HA_UPDATE_ALL(swats_adam, HA_RULE_SWATS_ADAM)
HA_UPDATE_ALL(swats_sgd, HA_RULE_SWATS_SGD)
HA_UPDATE_ALL(miadam, HA_RULE_MIADAM)

HA_CHECK(float, f32)
HA_CHECK(ha_f16, f16)
HA_CHECK(ha_bf16, bf16)

#define HA_PRE_S(G, g) HA_PRE(G, float, g, f32) HA_PRE(G, ha_f16, g, f16) HA_PRE(G, ha_bf16, g, bf16)
HA_PRE_S(float, f32)
HA_PRE_S(ha_f16, f16)
HA_PRE_S(ha_bf16, bf16)
