// Row softmax of a 64 x 256 fp32 matrix on 32 compute tiles, two rows each: the row max with
// linalg.reduce, exp(x - max) as one linalg.generic (the max broadcast along the row by its
// indexing map), the row sum, and a division by the sum broadcast back with linalg.broadcast.
#two_rows = affine_set<(d0, d1) : (d0 >= 0, -d0 + 1 >= 0, d1 >= 0, -d1 + 255 >= 0)>
#all = affine_set<(d0, d1) : (d0 >= 0, -d0 + 63 >= 0, d1 >= 0, -d1 + 255 >= 0)>
#full = affine_map<(d0, d1) -> (d0, d1)>
#per_row = affine_map<(d0, d1) -> (d0)>

module {
  func.func @softmax(%in: index, %out: index) attributes {grid = [32]} {
    %c0 = arith.constant 0 : index
    %c2 = arith.constant 2 : index
    %ninf = arith.constant 0xFF800000 : f32
    %zero = arith.constant 0.0 : f32
    %id = ktdp.get_compute_tile_id : index
    %r0 = arith.muli %id, %c2 : index

    %X = ktdp.construct_memory_view %in, sizes: [64, 256], strides: [256, 1] {
      coordinate_set = #all, memory_space = #ktdp.memory_space<global>
    } : memref<64x256xf32>
    %Y = ktdp.construct_memory_view %out, sizes: [64, 256], strides: [256, 1] {
      coordinate_set = #all, memory_space = #ktdp.memory_space<global>
    } : memref<64x256xf32>

    %xt = ktdp.construct_access_tile %X[%r0, %c0] {access_tile_set = #two_rows}
        : memref<64x256xf32> -> !ktdp.access_tile<2x256xindex>
    %x = ktdp.load %xt : !ktdp.access_tile<2x256xindex> -> tensor<2x256xf32>

    %m_init = tensor.empty() : tensor<2xf32>
    %m_fill = linalg.fill ins(%ninf : f32) outs(%m_init : tensor<2xf32>) -> tensor<2xf32>
    %max = linalg.reduce ins(%x : tensor<2x256xf32>) outs(%m_fill : tensor<2xf32>) dimensions = [1]
      (%v: f32, %acc: f32) {
        %bigger = arith.maximumf %v, %acc : f32
        linalg.yield %bigger : f32
      }

    %e_init = tensor.empty() : tensor<2x256xf32>
    %e = linalg.generic {indexing_maps = [#full, #per_row, #full], iterator_types = ["parallel", "parallel"]}
        ins(%x, %max : tensor<2x256xf32>, tensor<2xf32>) outs(%e_init : tensor<2x256xf32>) {
      ^bb0(%v: f32, %m: f32, %o: f32):
        %d = arith.subf %v, %m : f32
        %p = math.exp %d : f32
        linalg.yield %p : f32
    } -> tensor<2x256xf32>

    %s_init = tensor.empty() : tensor<2xf32>
    %s_fill = linalg.fill ins(%zero : f32) outs(%s_init : tensor<2xf32>) -> tensor<2xf32>
    %sum = linalg.reduce { arith.addf } ins(%e : tensor<2x256xf32>) outs(%s_fill : tensor<2xf32>) dimensions = [1]

    %b_init = tensor.empty() : tensor<2x256xf32>
    %sums = linalg.broadcast ins(%sum : tensor<2xf32>) outs(%b_init : tensor<2x256xf32>) dimensions = [1]
    %y_init = tensor.empty() : tensor<2x256xf32>
    %y = linalg.div ins(%e, %sums : tensor<2x256xf32>, tensor<2x256xf32>) outs(%y_init : tensor<2x256xf32>)
        -> tensor<2x256xf32>

    %yt = ktdp.construct_access_tile %Y[%r0, %c0] {access_tile_set = #two_rows}
        : memref<64x256xf32> -> !ktdp.access_tile<2x256xindex>
    ktdp.store %y, %yt : tensor<2x256xf32>, !ktdp.access_tile<2x256xindex>
    return
  }
}
