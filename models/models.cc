#include "models/models.h"
