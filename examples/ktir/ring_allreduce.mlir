// All-reduce of 32 rows of 128 fp32 values (one per compute tile) around a ring of the 32 tiles:
// in each of 31 steps every tile hands the value it holds to its right-hand neighbour
// (inter_tile_produce: tile i produces for group (i + 1) mod 32) and takes the one from its left
// (inter_tile_reduce: tile g consumes group g, folding the one partial into zeros), adding it to
// its sum. After the last step every tile holds the sum of all rows, and stores it as its row of
// the output.
#row = affine_set<(d0, d1) : (d0 >= 0, -d0 >= 0, d1 >= 0, -d1 + 127 >= 0)>
#all = affine_set<(d0, d1) : (d0 >= 0, -d0 + 31 >= 0, d1 >= 0, -d1 + 127 >= 0)>
// Group g's producer is the tile on its left, and its consumer the tile itself.
#left_of = affine_set<(i)[g] : ((g + 31) mod 32 - i == 0)>
#itself = affine_set<(i)[g] : (i - g == 0)>

module {
  func.func @ring_allreduce(%in: index, %out: index) attributes {grid = [32]} {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %steps = arith.constant 31 : index
    %zero = arith.constant 0.0 : f32
    %id = ktdp.get_compute_tile_id : index

    %X = ktdp.construct_memory_view %in, sizes: [32, 128], strides: [128, 1] {
      coordinate_set = #all, memory_space = #ktdp.memory_space<global>
    } : memref<32x128xf32>
    %Y = ktdp.construct_memory_view %out, sizes: [32, 128], strides: [128, 1] {
      coordinate_set = #all, memory_space = #ktdp.memory_space<global>
    } : memref<32x128xf32>
    %xt = ktdp.construct_access_tile %X[%id, %c0] {access_tile_set = #row}
        : memref<32x128xf32> -> !ktdp.access_tile<1x128xindex>
    %mine = ktdp.load %xt : !ktdp.access_tile<1x128xindex> -> tensor<1x128xf32>

    %z0 = tensor.empty() : tensor<1x128xf32>
    %zeros = linalg.fill ins(%zero : f32) outs(%z0 : tensor<1x128xf32>) -> tensor<1x128xf32>

    %sum, %last = scf.for %s = %c0 to %steps step %c1 iter_args(%acc = %mine, %held = %mine)
        -> (tensor<1x128xf32>, tensor<1x128xf32>) {
      %fut = ktdp.inter_tile_produce
          producer_tiles_per_group = #left_of
          : tensor<1x128xf32> -> !ktdp.tile_future<tensor<1x128xf32>, groups = affine_set<(g) : (g >= 0, -g + 31 >= 0)>>
      {
        ^bb0(%gid: index):
          ktdp.yield_partial %held : tensor<1x128xf32>
      }
      %got = ktdp.inter_tile_reduce(%fut)
          consumer_tiles_per_group = #itself,
          identity(%zeros : tensor<1x128xf32>)
          : !ktdp.tile_future<tensor<1x128xf32>, groups = affine_set<(g) : (g >= 0, -g + 31 >= 0)>> -> tensor<1x128xf32>
      {
        ^bb0(%lhs: tensor<1x128xf32>, %rhs: tensor<1x128xf32>):
          %e = tensor.empty() : tensor<1x128xf32>
          %t = linalg.add ins(%lhs, %rhs : tensor<1x128xf32>, tensor<1x128xf32>)
                          outs(%e : tensor<1x128xf32>) -> tensor<1x128xf32>
          ktdp.yield_reduced %t : tensor<1x128xf32>
      }
      %e2 = tensor.empty() : tensor<1x128xf32>
      %next = linalg.add ins(%acc, %got : tensor<1x128xf32>, tensor<1x128xf32>)
                         outs(%e2 : tensor<1x128xf32>) -> tensor<1x128xf32>
      scf.yield %next, %got : tensor<1x128xf32>, tensor<1x128xf32>
    }

    %yt = ktdp.construct_access_tile %Y[%id, %c0] {access_tile_set = #row}
        : memref<32x128xf32> -> !ktdp.access_tile<1x128xindex>
    ktdp.store %sum, %yt : tensor<1x128xf32>, !ktdp.access_tile<1x128xindex>
    return
  }
}
