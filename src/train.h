// train.h — `tiertrain train` and `tiertrain plan`: build the model, run the steps, report.
#pragma once
#include "config.h"
#include "profile.h"

int train_run(const config_t *cfg);  // returns the process exit code
int plan_run(const config_t *cfg);
// The calibration profile for the plan's floor, loaded into prof: returns prof, or NULL
// (the built-in defaults) when there is none. A broken file named by --profile is bad input
// (exit 2); a broken default one is named in a notice and the defaults stand in.
const profile_t *train_load_profile(const config_t *cfg, profile_t *prof);
