"""Every rule the adapters share, written once and free of any framework.

The numpy, torch, TensorFlow and Keras adapters convert tensors and glue autograd; what a
call *means* is decided here, one concept per module:

- :mod:`.reduce_ops`: reduce ops (Horovod's numbering), how ``op=`` / ``average=`` resolve,
  the one "op must be Average or Sum" check, ``gradient_predivide_factor``;
- :mod:`.dtypes`: the dtypes the core moves;
- :mod:`.wire`: which compression the C++ core applies on the wire and which runs in Python;
- :mod:`.names`: generated names in call order, and the members of a grouped call;
- :mod:`.gradients`: the gradient of every collective, read by both autograd glues, and
  the gradients a step reduces (None stays None);
- :mod:`.groups`: which gradients ``groups=`` puts in one grouped all-reduce;
- :mod:`.local_gradients`: gradients kept local, and how they are scaled;
- :mod:`.options`: which options of ``DistributedOptimizer`` beyond Horovod combine;
- :mod:`.launch_environment`: how many processes the launcher started (srun, mpirun,
  mpiexec), checked against MPI's world at init.
"""

from .dtypes import FLOATING, SUPPORTED_DTYPES, WIRE_PACKABLE, check_dtype  # noqa: F401
from .groups import (apart_and_together, check_groups, groups_arg, plan_groups,  # noqa: F401
                     rank0_positions, split_list)
from .gradients import (GRADIENTS, GradRule, gradient_scale, own_rows,  # noqa: F401
                        reduce_present, reducescatter_rows)
from .names import (auto_name, group_names, member_names, named_entries,  # noqa: F401
                    parameter_names, reset_name_counters, valid_name, variable_label,
                    with_labels)
from .reduce_ops import (REDUCE_OP_NAMES, Adasum, Average, Max, Min, Product, Sum,  # noqa: F401
                         check_adasum_ranks, check_predivide, gathered_rows_divisor, integer_arg, predivide,
                         reduction, require_average_or_sum, resolve_op)
from .wire import compressed, decompressed, wire_code, wire_format  # noqa: F401
