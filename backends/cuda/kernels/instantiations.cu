// instantiations.cu: every kernel of homeadam.cuh (kernels::all_kernel_names), for the compile
// check: the update kernels {rule}_{p}_{g}_{s}, ha_check_{g}, ha_home_pre_{g}_{s},
// ha_home_bound_{g}_{e} (element state types only), ha_home_hist_{g}_{s}, ha_grad_sq_{g} and
// ha_reset.
// The rules and storage types are the lists of kernels.rs (HA_RULE_KERNELS, HA_STORAGE_P/G/S/E:
// X(C type, name, context...)); each level passes its choices on to the next as context.
#include "homeadam.cuh"

#define HA_UPDATE_RULE(name, id, ...) HA_STORAGE_P(HA_UPDATE_P, name, id)
#define HA_UPDATE_P(P, p, name, id) HA_STORAGE_G(HA_UPDATE_G, P, p, name, id)
#define HA_UPDATE_G(G, g, P, p, name, id) HA_STORAGE_S(HA_UPDATE_S, G, g, P, p, name, id)
#define HA_UPDATE_S(S, s, G, g, P, p, name, id) HA_UPDATE(name, id, P, G, S, p, g, s)
HA_RULE_KERNELS(HA_UPDATE_RULE)

#define HA_CHECK_G(G, g, unused) HA_CHECK(G, g)
HA_STORAGE_G(HA_CHECK_G, )

#define HA_GRAD_SQ_G(G, g, unused) HA_GRAD_SQ(G, g)
HA_STORAGE_G(HA_GRAD_SQ_G, )

#define HA_PRE_G(G, g, unused) HA_STORAGE_S(HA_PRE_S, G, g)
#define HA_PRE_S(S, s, G, g) HA_PRE(G, S, g, s)
HA_STORAGE_G(HA_PRE_G, )

#define HA_HIST_G(G, g, unused) HA_STORAGE_S(HA_HIST_S, G, g)
#define HA_HIST_S(S, s, G, g) HA_HIST(G, S, g, s)
HA_STORAGE_G(HA_HIST_G, )

#define HA_HOME_BOUND_G(G, g, unused) HA_STORAGE_E(HA_HOME_BOUND_E, G, g)
#define HA_HOME_BOUND_E(S, s, G, g) HA_HOME_BOUND(G, S, g, s)
HA_STORAGE_G(HA_HOME_BOUND_G, )
