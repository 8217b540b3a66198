#include "ir/autodiff.h"
