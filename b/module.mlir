module @IrToHlo.32 attributes {mhlo.cross_program_prefetches = [], mhlo.input_output_alias = [], mhlo.is_dynamic = false, mhlo.use_auto_spmd_partitioning = false} {
  func.func @main(%arg0: tensor<f32>, %arg1: tensor<4xf32>, %arg2: tensor<4xf32>, %arg3: tensor<4x8xf32>, %arg4: tensor<2x8xf32>) -> tensor<2x4xf32> {
    %cst = stablehlo.constant dense<5.000000e-01> : tensor<2x4xf32>
    %0 = stablehlo.transpose %arg3, dims = [1, 0] {result_layout = dense<[0, 1]> : tensor<2xindex>, xla_shape = "f32[8,4]{0,1}"} : (tensor<4x8xf32>) -> tensor<8x4xf32>
    %1 = stablehlo.dot_general %arg4, %0, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
    %2 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<4xf32>) -> tensor<2x4xf32>
    %3 = stablehlo.add %1, %2 : tensor<2x4xf32>
    %4 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<4xf32>) -> tensor<2x4xf32>
    %5 = stablehlo.add %3, %4 : tensor<2x4xf32>
    %6:2 = "stablehlo.all_reduce"(%5, %arg0) <{replica_groups = dense<> : tensor<0x0xi64>}> ({
    ^bb0(%arg5: tensor<f32>, %arg6: tensor<f32>):
      %8 = stablehlo.add %arg5, %arg6 : tensor<f32>
      stablehlo.return %8 : tensor<f32>
    }) : (tensor<2x4xf32>, tensor<f32>) -> (tensor<2x4xf32>, tensor<f32>)
    %7 = stablehlo.multiply %6#0, %cst : tensor<2x4xf32>
    return %7 : tensor<2x4xf32>
  }
}
