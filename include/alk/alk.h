// The umbrella header: everything a user of alk needs.
#pragma once
#include "alk/dtype.h"
#include "alk/error.h"
#include "alk/tensor.h"
