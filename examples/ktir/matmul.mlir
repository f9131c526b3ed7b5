// C = A @ B with A: 256 x 256, B: 256 x 512 (fp16) and C: 256 x 512 (fp32), on a 2 x 16 grid of
// compute tiles. Tile (i, j) owns the 128 x 32 block of C at rows 128 i, columns 32 j, and walks
// K in steps of 64 with an scf.for whose iter_arg is the fp32 accumulator.
#blk_a = affine_set<(d0, d1) : (d0 >= 0, -d0 + 127 >= 0, d1 >= 0, -d1 + 63 >= 0)>
#blk_b = affine_set<(d0, d1) : (d0 >= 0, -d0 + 63 >= 0, d1 >= 0, -d1 + 31 >= 0)>
#blk_c = affine_set<(d0, d1) : (d0 >= 0, -d0 + 127 >= 0, d1 >= 0, -d1 + 31 >= 0)>

module {
  func.func @matmul(%a: index, %b: index, %c: index) attributes {grid = [2, 16]} {
    %c0 = arith.constant 0 : index
    %k_end = arith.constant 256 : index
    %k_step = arith.constant 64 : index
    %rows = arith.constant 128 : index
    %cols = arith.constant 32 : index
    %zero = arith.constant 0.0 : f32
    %tid:2 = ktdp.get_compute_tile_id : index, index
    %m0 = arith.muli %tid#0, %rows : index
    %n0 = arith.muli %tid#1, %cols : index

    %A = ktdp.construct_memory_view %a, sizes: [256, 256], strides: [256, 1] {
      coordinate_set = affine_set<(d0, d1) : (d0 >= 0, -d0 + 255 >= 0, d1 >= 0, -d1 + 255 >= 0)>,
      memory_space = #ktdp.memory_space<global>
    } : memref<256x256xf16>
    %B = ktdp.construct_memory_view %b, sizes: [256, 512], strides: [512, 1] {
      coordinate_set = affine_set<(d0, d1) : (d0 >= 0, -d0 + 255 >= 0, d1 >= 0, -d1 + 511 >= 0)>,
      memory_space = #ktdp.memory_space<global>
    } : memref<256x512xf16>
    %C = ktdp.construct_memory_view %c, sizes: [256, 512], strides: [512, 1] {
      coordinate_set = affine_set<(d0, d1) : (d0 >= 0, -d0 + 255 >= 0, d1 >= 0, -d1 + 511 >= 0)>,
      memory_space = #ktdp.memory_space<global>
    } : memref<256x512xf32>

    %init = tensor.empty() : tensor<128x32xf32>
    %acc0 = linalg.fill ins(%zero : f32) outs(%init : tensor<128x32xf32>) -> tensor<128x32xf32>
    %acc = scf.for %k = %c0 to %k_end step %k_step iter_args(%sum = %acc0) -> (tensor<128x32xf32>) {
      %at = ktdp.construct_access_tile %A[%m0, %k] {access_tile_set = #blk_a}
          : memref<256x256xf16> -> !ktdp.access_tile<128x64xindex>
      %bt = ktdp.construct_access_tile %B[%k, %n0] {access_tile_set = #blk_b}
          : memref<256x512xf16> -> !ktdp.access_tile<64x32xindex>
      %x = ktdp.load %at : !ktdp.access_tile<128x64xindex> -> tensor<128x64xf16>
      %y = ktdp.load %bt : !ktdp.access_tile<64x32xindex> -> tensor<64x32xf16>
      %next = linalg.matmul ins(%x, %y : tensor<128x64xf16>, tensor<64x32xf16>)
                            outs(%sum : tensor<128x32xf32>) -> tensor<128x32xf32>
      scf.yield %next : tensor<128x32xf32>
    }
    %ct = ktdp.construct_access_tile %C[%m0, %n0] {access_tile_set = #blk_c}
        : memref<256x512xf32> -> !ktdp.access_tile<128x32xindex>
    ktdp.store %acc, %ct : tensor<128x32xf32>, !ktdp.access_tile<128x32xindex>
    return
  }
}
