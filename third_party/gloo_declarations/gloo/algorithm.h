// See third_party/gloo_declarations/README.md: declarations only.
#pragma once
#include "gloo/context.h"
