// train.h — `tiertrain train` and `tiertrain plan`: build the model, run the steps, report.
#pragma once
#include "config.h"

int train_run(const config_t *cfg);  // returns the process exit code
int plan_run(const config_t *cfg);
