// The umbrella header: everything a user of alk needs.
#pragma once
#include "alk/compile.h"
#include "alk/device.h"
#include "alk/data.h"
#include "alk/dtype.h"
#include "alk/error.h"
#include "alk/generate.h"
#include "alk/io.h"
#include "alk/nn.h"
#include "alk/optim.h"
#include "alk/pretrained.h"
#include "alk/tensor.h"
#include "alk/tokenizer.h"
